//! A `ShouldRateLimit` call whose body is not a protobuf `RateLimitRequest`, sent to the real
//! `tollgate serve`: answered `INVALID_ARGUMENT` (the caller's mistake, not the server's
//! `INTERNAL`), counting nothing. And a valid call many times larger than the server codec's
//! first buffer, read and answered whole.

mod common;

use bytes::{Buf, BufMut};
use common::Server;
use tollgate_rls::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_rls::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_rls::rls::RateLimitRequest;
use tollgate_rls::rls::rate_limit_service_client::RateLimitServiceClient;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Code, Status};

const METHOD: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Sends the given bytes as the message, and reads the answer's bytes back.
#[derive(Default)]
struct RawCodec;

struct Raw;

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

/// `tollgate serve` (memory store) with one rule, `partner:{partner}` at 5 an hour; a runtime
/// and a channel to its gRPC listener.
fn connected(dir: &std::path::Path) -> (Server, tokio::runtime::Runtime, Channel) {
    let file = dir.join("t.toml");
    std::fs::write(
        &file,
        "[server]\ngrpc_listen = \"127.0.0.1:0\"\n\n[[rls.rule]]\ndomain = \"edi\"\n\
         descriptor = [\"partner\"]\nmetering_id = \"partner:{partner}\"\nlimit = 5\nunit = \"hour\"\n",
    )
    .unwrap();
    let server = Server::start(&["--store", "memory", "--config", file.to_str().unwrap()]);
    let grpc = format!("http://{}", server.grpc_addr());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let channel = rt.block_on(Channel::from_shared(grpc).unwrap().connect()).unwrap();
    (server, rt, channel)
}

#[test]
fn a_request_that_is_not_protobuf_is_invalid_argument_and_counts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, rt, channel) = connected(dir.path());
    rt.block_on(async {
        // Field 1 (domain) declared as 100 bytes long, with 3 sent: a truncated message.
        for garbage in [vec![0x0a, 100, b'e', b'd', b'i'], vec![0xff; 16]] {
            let mut raw = tonic::client::Grpc::new(channel.clone());
            raw.ready().await.unwrap();
            let path = tonic::codegen::http::uri::PathAndQuery::from_static(METHOD);
            let err = raw
                .unary(tonic::Request::new(garbage.clone()), path, RawCodec)
                .await
                .expect_err("a malformed request is refused");
            assert_eq!(err.code(), Code::InvalidArgument, "{garbage:?}: {err:?}");
            assert!(err.message().contains("not a valid protobuf message"), "{err:?}");
        }
        // Nothing was counted: the first real call has 4 of 5 left.
        let mut c = RateLimitServiceClient::new(channel);
        let descriptor = RateLimitDescriptor {
            entries: vec![Entry { key: "partner".into(), value: "ACME".into() }],
            hits_addend: None,
        };
        let r = RateLimitRequest {
            domain: "edi".into(),
            descriptors: vec![descriptor],
            hits_addend: 1,
        };
        let answer = c.should_rate_limit(r).await.unwrap().into_inner();
        let status = &answer.statuses[0];
        assert_eq!(status.limit_remaining, 4, "{answer:?}");
    });
}

#[test]
fn a_request_and_answer_larger_than_the_first_buffer_are_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, rt, channel) = connected(dir.path());
    rt.block_on(async {
        // 200 descriptors with long partner names: about 16 KB, and a longer answer.
        let descriptors: Vec<RateLimitDescriptor> = (0..200)
            .map(|i| RateLimitDescriptor {
                entries: vec![Entry { key: "partner".into(), value: format!("{i:0>64}") }],
                hits_addend: None,
            })
            .collect();
        let request = RateLimitRequest { domain: "edi".into(), descriptors, hits_addend: 1 };
        let bytes = prost::Message::encode_to_vec(&request);
        assert!(bytes.len() > 8 * 1024, "{} bytes", bytes.len());
        let mut raw = tonic::client::Grpc::new(channel);
        raw.ready().await.unwrap();
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(METHOD);
        let answer = raw.unary(tonic::Request::new(bytes), path, RawCodec).await.unwrap();
        let answer = answer.into_inner();
        assert!(answer.len() > 8 * 1024, "{} bytes", answer.len());
        let answer: tollgate_rls::rls::RateLimitResponse =
            prost::Message::decode(answer.as_slice()).unwrap();
        assert_eq!(answer.statuses.len(), 200);
        assert!(answer.statuses.iter().all(|s| s.limit_remaining == 4), "{:?}", answer.statuses[0]);
    });
}

/// A request past 64 KiB is refused before it is decoded (tonic's own default took 4 MiB per
/// call), one under it whose id is far too long gets a short message, and the connection goes
/// on answering; neither counts.
#[test]
fn a_request_past_64_kib_or_with_a_huge_id_is_refused_and_counts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, rt, channel) = connected(dir.path());
    rt.block_on(async {
        let descriptor = |value: String| RateLimitDescriptor {
            entries: vec![Entry { key: "partner".into(), value }],
            hits_addend: None,
        };
        let big = RateLimitRequest {
            domain: "edi".into(),
            descriptors: vec![descriptor("A".repeat(64 * 1024))],
            hits_addend: 1,
        };
        let mut c = RateLimitServiceClient::new(channel.clone());
        let err = c.should_rate_limit(big).await.expect_err("refused");
        assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
        // Under the cap, an id far past 256 bytes: INVALID_ARGUMENT, its message (a header)
        // showing the id's start and length; it was a 60 KiB header the client reset before.
        let long = RateLimitRequest {
            domain: "edi".into(),
            descriptors: vec![descriptor("A".repeat(60 * 1024))],
            hits_addend: 1,
        };
        let err = c.should_rate_limit(long).await.expect_err("refused");
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains("(61448 bytes)"), "{}", err.message());
        assert!(err.message().len() < 512, "{}", err.message());
        let small = RateLimitRequest {
            domain: "edi".into(),
            descriptors: vec![descriptor("ACME".into())],
            hits_addend: 1,
        };
        let answer = c.should_rate_limit(small).await.unwrap().into_inner();
        assert_eq!(answer.statuses[0].limit_remaining, 4, "{answer:?}");
        // The health service, open to anyone, takes no more.
        use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
        let mut health = HealthClient::new(channel);
        let big = HealthCheckRequest { service: "A".repeat(64 * 1024) };
        let err = health.check(big).await.expect_err("refused");
        assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    });
}
