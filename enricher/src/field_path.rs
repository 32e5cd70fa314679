//! Field paths into JSON events (`customer.address.city`) and the lookup keys
//! they make.

use serde_json::Value;

/// Text that is not a field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a field path (fields separated by single dots)")]
pub struct NotAPath(pub String);

/// Why an event gives no lookup key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyFieldError {
    /// A key field the event lacks.
    #[error("missing key field `{0}`")]
    Missing(String),
    /// A key field whose value is an object or an array.
    #[error("key field `{field}` is {kind}, not a string, number or boolean")]
    NotScalar {
        /// The field's path.
        field: String,
        /// `an object` or `an array`.
        kind: &'static str,
    },
}

/// A dotted path of object fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    text: String,
    segments: Vec<String>,
}

impl FieldPath {
    /// Parses `a.b.c`; every segment must be non-empty.
    pub fn parse(text: &str) -> Result<Self, NotAPath> {
        let segments: Vec<String> = text.split('.').map(str::to_owned).collect();
        if segments.iter().any(String::is_empty) {
            return Err(NotAPath(text.to_owned()));
        }
        Ok(FieldPath {
            text: text.to_owned(),
            segments,
        })
    }

    /// The path of these fields (each non-empty).
    pub fn from_segments(segments: Vec<String>) -> Result<Self, NotAPath> {
        FieldPath::parse(&segments.join(".")).and_then(|path| {
            if path.segments == segments {
                Ok(path)
            } else {
                Err(NotAPath(segments.join(".")))
            }
        })
    }

    /// The first field, and the fields below it.
    pub fn split_first(&self) -> (&str, &[String]) {
        let (first, below) = self.segments.split_first().expect("parsed non-empty");
        (first, below)
    }

    /// The value at `fields` below `value`, taken out of it (nothing is
    /// copied), if every field on the way exists.
    pub fn descend(value: Value, fields: &[String]) -> Option<Value> {
        fields.iter().try_fold(value, |value, field| match value {
            Value::Object(mut object) => object.remove(field),
            _ => None,
        })
    }

    /// Its fields, in order.
    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// The lookup key `paths` give in an event (`get` reads the `i`th path): the
/// bare value for one path, an array in path order for several. `Ok(None)` when
/// a key field is null (nothing to look up); an error names a missing field or
/// one that is not a scalar.
pub fn key_of(
    paths: &[FieldPath],
    get: impl Fn(usize, &FieldPath) -> Option<Value>,
) -> Result<Option<Value>, KeyFieldError> {
    // The `i`th key value: `None` when null.
    let scalar = |i: usize, path: &FieldPath| match get(i, path) {
        None => Err(KeyFieldError::Missing(path.as_str().to_owned())),
        Some(Value::Null) => Ok(None),
        Some(value @ (Value::Object(_) | Value::Array(_))) => Err(KeyFieldError::NotScalar {
            field: path.as_str().to_owned(),
            kind: if value.is_object() {
                "an object"
            } else {
                "an array"
            },
        }),
        Some(scalar) => Ok(Some(scalar)),
    };
    if let [path] = paths {
        return scalar(0, path);
    }
    let mut values = Vec::with_capacity(paths.len());
    for (i, path) in paths.iter().enumerate() {
        match scalar(i, path)? {
            Some(value) => values.push(value),
            None => return Ok(None),
        }
    }
    Ok(Some(Value::Array(values)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn paths(texts: &[&str]) -> Vec<FieldPath> {
        texts.iter().map(|t| FieldPath::parse(t).unwrap()).collect()
    }

    #[test]
    fn parses_paths() {
        assert!(FieldPath::parse("a.b").is_ok());
        assert!(FieldPath::parse("a..b").is_err());
        assert!(FieldPath::parse("").is_err());
        assert!(FieldPath::parse(".a").is_err());
    }

    fn key_in(event: &Value, texts: &[&str]) -> Result<Option<Value>, KeyFieldError> {
        key_of(&paths(texts), |_, p| {
            FieldPath::descend(event.clone(), &p.segments)
        })
    }

    #[test]
    fn extracts_keys() {
        let event = json!({"user_id": 7, "line": {"sku": "A-1"}, "region": "eu", "gone": null, "tags": [1]});
        assert_eq!(key_in(&event, &["user_id"]), Ok(Some(json!(7))));
        assert_eq!(
            key_in(&event, &["line.sku", "region"]),
            Ok(Some(json!(["A-1", "eu"])))
        );
        assert_eq!(key_in(&event, &["gone"]), Ok(None));
        assert_eq!(
            key_in(&event, &["line.price"]),
            Err(KeyFieldError::Missing("line.price".into()))
        );
        assert_eq!(
            key_in(&event, &["tags"]).unwrap_err().to_string(),
            "key field `tags` is an array, not a string, number or boolean"
        );
        assert!(matches!(
            key_in(&event, &["line"]),
            Err(KeyFieldError::NotScalar {
                kind: "an object",
                ..
            })
        ));
        assert_eq!(
            key_in(&json!([1]), &["a"]),
            Err(KeyFieldError::Missing("a".into()))
        );
    }
}
