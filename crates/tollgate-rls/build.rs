//! Compiles `proto/` into the gRPC messages, server and client, with protox (a protobuf
//! compiler in Rust), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/envoy/service/ratelimit/v3/rls.proto"];
    for dir in ["proto/envoy/service", "proto/envoy/extensions", "proto/envoy/config"] {
        println!("cargo:rerun-if-changed={dir}");
    }
    let fds = protox::compile(protos, ["proto"])?;
    // A request that does not decode is INVALID_ARGUMENT (see `src/codec.rs`).
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .codec_path("crate::codec::ArgumentCodec")
        .compile_fds(fds)?;
    Ok(())
}
