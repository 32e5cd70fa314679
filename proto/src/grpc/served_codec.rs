//! The served service's codec: prost's, but a request is decoded from its
//! bytes as one slice. tonic hands a decoder the whole message, buffered in
//! one piece; prost reading it through tonic's buffer pays a buffer
//! `advance` per field and per varint, the largest part of decoding a
//! `BatchGet`'s keys. Responses are encoded as prost encodes them.

use std::marker::PhantomData;

use prost::Message;
use prost::bytes::Buf as _;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

/// The codec of the served service (set as its `codec_path` by the build).
#[derive(Debug, Clone, Copy)]
pub(super) struct ServedCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for ServedCodec<T, U> {
    fn default() -> Self {
        ServedCodec(PhantomData)
    }
}

impl<T, U> Codec for ServedCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = SliceDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        SliceDecoder(PhantomData)
    }
}

/// Decodes a message from its bytes as one slice when they are in one piece
/// (as tonic buffers them), else through the buffer.
#[derive(Debug, Clone, Copy)]
pub(super) struct SliceDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for SliceDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let len = buf.remaining();
        let decoded = if buf.chunk().len() == len {
            let decoded = U::decode(buf.chunk());
            buf.advance(len);
            decoded
        } else {
            U::decode(buf)
        };
        // As tonic's prost codec answers a message it cannot decode.
        decoded
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }
}
