//! The protobuf codec of the gRPC services: prost's, except that a request that does not
//! decode is the client's mistake, `INVALID_ARGUMENT`, where tonic answers `INTERNAL`. Nothing
//! is counted for it: the service never sees the request.

use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::{Code, Status};
use tonic_prost::ProstCodec;

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
    type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
    type Decoder = ArgumentDecoder<<ProstCodec<T, U> as Codec>::Decoder>;

    fn encoder(&mut self) -> Self::Encoder {
        self.0.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        ArgumentDecoder(self.0.decoder())
    }
}

/// A decoder whose failures are `INVALID_ARGUMENT`.
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
        self.0.buffer_settings()
    }
}
