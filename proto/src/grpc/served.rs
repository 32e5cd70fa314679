//! The server's side of `tributary.v1.Lookup`: the generated service, whose
//! responses carry each row as a [`ServedValue`], so that a row read from a
//! table goes out as the protobuf encoding of its stored JSON, never built
//! into a [`v1::Value`] tree to be encoded again.
//!
//! A `ServedValue` has the wire form of a `Value`: clients decode these
//! responses with the messages of [`v1`].

use prost::bytes::{Buf, BufMut, Bytes};
use prost::encoding::{DecodeContext, WireType};
use prost::{DecodeError, Message};

use super::transcode::{Untranscoded, transcode};
use super::{from_json_slice, v1};

/// Generated server of package `tributary.v1`, over the response messages
/// `GetResponse`, `BatchGetResponse` and `ScanRow` with [`ServedValue`] rows;
/// every other message is [`v1`]'s.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod v1_served {
    include!(concat!(env!("OUT_DIR"), "/served/tributary.v1.rs"));
}

/// A `tributary.v1.Value` in a response: a tree, or already encoded.
/// Equality compares the representations (a tree never equals its encoding):
/// it is there for the generated messages, not for comparing rows.
#[derive(Clone, Debug, PartialEq)]
pub enum ServedValue {
    /// A value built as a tree (a forwarded answer's, a scanned row).
    Tree(v1::Value),
    /// The encoding of a value (a row read from its stored JSON).
    Encoded(Bytes),
}

impl ServedValue {
    /// JSON text as an encoded value; an object that repeats a field name is
    /// built as a tree instead (see [`transcode`](super::transcode)).
    pub fn from_json_slice(json: &[u8]) -> Result<Self, serde_json::Error> {
        let mut encoded = Vec::with_capacity(json.len() + json.len() / 2);
        match transcode(json, &mut encoded) {
            Ok(()) => Ok(ServedValue::Encoded(encoded.into())),
            Err(Untranscoded::RepeatedName) => from_json_slice(json).map(ServedValue::Tree),
            Err(Untranscoded::Json(e)) => Err(e),
        }
    }

    /// The value's encoding (a tree is encoded).
    pub fn into_encoded(self) -> Bytes {
        match self {
            ServedValue::Tree(value) => value.encode_to_vec().into(),
            ServedValue::Encoded(bytes) => bytes,
        }
    }
}

impl Default for ServedValue {
    fn default() -> Self {
        ServedValue::Tree(v1::Value::default())
    }
}

impl From<v1::Value> for ServedValue {
    fn from(value: v1::Value) -> Self {
        ServedValue::Tree(value)
    }
}

impl Message for ServedValue {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        match self {
            ServedValue::Tree(value) => value.encode_raw(buf),
            ServedValue::Encoded(bytes) => buf.put_slice(bytes),
        }
    }

    /// Decoding builds the tree (a server decodes no responses; this keeps
    /// the type a complete message).
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        if let ServedValue::Encoded(bytes) = self {
            *self = ServedValue::Tree(v1::Value::decode(&bytes[..])?);
        }
        let ServedValue::Tree(value) = self else {
            unreachable!("an encoded value was just decoded");
        };
        value.merge_field(tag, wire_type, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        match self {
            ServedValue::Tree(value) => value.encoded_len(),
            ServedValue::Encoded(bytes) => bytes.len(),
        }
    }

    fn clear(&mut self) {
        *self = ServedValue::default();
    }
}

#[cfg(test)]
mod tests {
    use super::v1_served::{BatchGetResponse, GetResponse};
    use super::*;
    use crate::grpc::from_json;

    #[test]
    fn a_served_response_decodes_as_the_clients_message() {
        let row = r#"{"id":7,"name":"ünïcode","tags":["a",null],"n":{"x":1.5}}"#;
        let repeated = r#"{"a":1,"a":2}"#;
        let served = BatchGetResponse {
            results: vec![
                GetResponse {
                    found: true,
                    row: Some(ServedValue::from_json_slice(row.as_bytes()).unwrap()),
                    ..GetResponse::default()
                },
                GetResponse::default(),
                GetResponse {
                    found: true,
                    row: Some(ServedValue::from_json_slice(repeated.as_bytes()).unwrap()),
                    ..GetResponse::default()
                },
            ],
        };
        assert!(matches!(
            served.results[0].row,
            Some(ServedValue::Encoded(_))
        ));
        assert!(matches!(served.results[2].row, Some(ServedValue::Tree(_))));
        let decoded = v1::BatchGetResponse::decode(&served.encode_to_vec()[..]).unwrap();
        let tree = |text: &str| from_json(&serde_json::from_str(text).unwrap());
        assert_eq!(decoded.results[0].row, Some(tree(row)));
        assert!(decoded.results[0].found);
        assert_eq!(decoded.results[1], v1::GetResponse::default());
        assert_eq!(decoded.results[2].row, Some(tree(r#"{"a":2}"#)));
        // Decoded back into the server's message, a row is a tree again.
        let again = BatchGetResponse::decode(&served.encode_to_vec()[..]).unwrap();
        assert_eq!(again.results[0].row, Some(ServedValue::Tree(tree(row))));
        assert!(ServedValue::from_json_slice(b"{\"a\":").is_err());
    }
}
