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

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body::Frame;
    use http_body_util::StreamBody;
    use prost::bytes::Bytes;
    use serde_json::json;
    use tonic::Code;
    use tonic::codec::Streaming;

    use super::*;
    use crate::grpc::{from_json, v1};

    type Body =
        StreamBody<futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

    /// `messages` as gRPC frames them (uncompressed, one after the other),
    /// cut into pieces of `piece` bytes as the network may deliver them.
    fn body(messages: &[&[u8]], piece: usize) -> Body {
        let mut framed = Vec::new();
        for message in messages {
            framed.push(0);
            framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
            framed.extend_from_slice(message);
        }
        let pieces: Vec<_> = framed
            .chunks(piece)
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        StreamBody::new(futures::stream::iter(pieces))
    }

    fn decoder() -> SliceDecoder<v1::BatchGetRequest> {
        ServedCodec::<v1::BatchGetResponse, v1::BatchGetRequest>::default().decoder()
    }

    #[tokio::test]
    async fn requests_in_pieces_and_back_to_back_decode_as_prost_decodes_them() {
        let request = v1::BatchGetRequest {
            table: "users".into(),
            keys: (0..100)
                .map(|i| from_json(&json!({"id": i, "region": format!("r{i}")})))
                .collect(),
            min_position: None,
            as_of_us: Some(7),
        };
        let encoded = request.encode_to_vec();
        let other = v1::BatchGetRequest {
            table: "orders".into(),
            ..v1::BatchGetRequest::default()
        };
        // Two messages back to back: each decoded consumes exactly its own bytes.
        let messages = [&encoded[..], &other.encode_to_vec()];
        for piece in [1, 7, 2 * encoded.len()] {
            let mut stream = Streaming::new_request(decoder(), body(&messages, piece), None, None);
            for expected in [&request, &other] {
                let decoded = stream.message().await.unwrap();
                assert_eq!(decoded.as_ref(), Some(expected), "pieces of {piece} bytes");
            }
            assert_eq!(stream.message().await.unwrap(), None);
        }
    }

    #[tokio::test]
    async fn a_request_that_is_not_the_message_is_refused_as_tonic_refuses_it() {
        // A field whose length runs past the end of the message.
        let mut stream =
            Streaming::new_request(decoder(), body(&[&[0x12, 0x40, 0x01]], 64), None, None);
        let refused = stream.message().await.unwrap_err();
        assert_eq!(refused.code(), Code::Internal, "{refused:?}");
    }
}
