//! The protobuf codec of the gRPC services: prost's, except that a request that does not
//! decode is the client's mistake, `INVALID_ARGUMENT`, where tonic answers `INTERNAL`. Nothing
//! is counted for it: the service never sees the request.
//!
//! Its buffers start at [`BUFFER_BYTES`], not tonic's 8 KiB: a call allocates one for its
//! request and one for its answer, both a few hundred bytes, and a buffer under 1 KiB comes
//! from the allocator's small bins (glibc sorts its free lists before every larger request).
//! A longer message grows its buffer as before.

use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};
use tonic_prost::ProstCodec;

/// The size a call's encode and decode buffers start at.
const BUFFER_BYTES: usize = 512;

/// tonic's default: how much is encoded before a stream yields.
const YIELD_BYTES: usize = 32 * 1024;

fn buffer_settings() -> BufferSettings {
    BufferSettings::new(BUFFER_BYTES, YIELD_BYTES)
}

/// Prost's codec with decode errors answered `INVALID_ARGUMENT`.
#[derive(Debug)]
pub(crate) struct ArgumentCodec<T, U>(ProstCodec<T, U>);

impl<T, U> Default for ArgumentCodec<T, U> {
    fn default() -> Self {
        Self(ProstCodec::default())
    }
}

impl<T, U> Codec for ArgumentCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = SmallEncoder<<ProstCodec<T, U> as Codec>::Encoder>;
    type Decoder = ArgumentDecoder<<ProstCodec<T, U> as Codec>::Decoder>;

    fn encoder(&mut self) -> Self::Encoder {
        SmallEncoder(self.0.encoder())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ArgumentDecoder(self.0.decoder())
    }
}

/// Prost's encoder with small buffers.
#[derive(Debug)]
pub(crate) struct SmallEncoder<E>(E);

impl<E: Encoder> Encoder for SmallEncoder<E> {
    type Item = E::Item;
    type Error = E::Error;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
        self.0.encode(item, dst)
    }

    fn buffer_settings(&self) -> BufferSettings {
        buffer_settings()
    }
}

/// A decoder whose failures are `INVALID_ARGUMENT`, with small buffers.
#[derive(Debug)]
pub(crate) struct ArgumentDecoder<D>(D);

impl<D: Decoder<Error = Status>> Decoder for ArgumentDecoder<D> {
    type Item = D::Item;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        self.0.decode(buf).map_err(|s| match s.code() {
            Code::Internal => Status::invalid_argument(format!(
                "the request is not a valid protobuf message of this method: {}",
                s.message()
            )),
            _ => s,
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        buffer_settings()
    }
}
