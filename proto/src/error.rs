//! Errors of the wire-format codecs.

/// A change event or key could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The bytes are not JSON.
    #[error("not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The JSON is valid but a field is missing or has the wrong type.
    #[error("field `{field}`: {problem}")]
    Field {
        /// Path of the offending field, e.g. `source.pos`.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
}

impl CodecError {
    pub(crate) fn field(field: impl Into<String>, problem: impl Into<String>) -> Self {
        CodecError::Field {
            field: field.into(),
            problem: problem.into(),
        }
    }
}
