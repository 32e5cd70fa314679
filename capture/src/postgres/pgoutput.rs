//! The `pgoutput` logical decoding messages, protocol version 1, read from
//! the bytes of one `XLogData` payload (or one row of
//! `pg_logical_slot_peek_binary_changes`).
//!
//! The format is PostgreSQL's "Logical Streaming Replication Protocol"
//! message formats: big-endian integers, NUL-terminated strings, tuples of
//! `n` (null), `u` (an unchanged TOASTed value the server did not send) or
//! `t` (the type's text output, in the database's encoding, kept as bytes
//! here: turning it into a value is the type mapping's business). Hand
//! written, as the binlog decoder is: it is the core of capture.

use tributary_proto::lsn::Lsn;

/// One decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// `B`: a transaction starts.
    Begin {
        /// The LSN of its commit record.
        final_lsn: Lsn,
        /// Commit time, microseconds since 2000-01-01 UTC.
        commit_time: i64,
        /// Its transaction id.
        xid: u32,
    },
    /// `C`: the transaction begun last commits.
    Commit {
        /// The LSN of the commit record.
        commit_lsn: Lsn,
        /// The LSN just past it: where a restart resumes.
        end_lsn: Lsn,
        /// Commit time, microseconds since 2000-01-01 UTC.
        commit_time: i64,
    },
    /// `O`: the changes come from another node (replicated in).
    Origin {
        /// The commit LSN on the origin.
        lsn: Lsn,
        /// The origin's name.
        name: String,
    },
    /// `R`: a table's shape, sent before its first change and after DDL.
    Relation(Relation),
    /// `Y`: a non-built-in type a relation's column uses.
    Type {
        /// Its OID.
        oid: u32,
        /// Its schema.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// `I`: a row was inserted.
    Insert {
        /// The relation's OID.
        relation: u32,
        /// The new row.
        new: Tuple,
    },
    /// `U`: a row was updated.
    Update {
        /// The relation's OID.
        relation: u32,
        /// The old key (the key changed) or row (`REPLICA IDENTITY FULL`);
        /// `None` when the key did not change under the default identity.
        old: Option<OldRow>,
        /// The new row; unchanged TOASTed columns are [`Datum::UnchangedToast`].
        new: Tuple,
    },
    /// `D`: a row was deleted.
    Delete {
        /// The relation's OID.
        relation: u32,
        /// Its key, or the whole row with `REPLICA IDENTITY FULL`.
        old: OldRow,
    },
    /// `T`: tables were truncated.
    Truncate {
        /// The relations' OIDs.
        relations: Vec<u32>,
        /// `TRUNCATE … CASCADE`.
        cascade: bool,
        /// `TRUNCATE … RESTART IDENTITY`.
        restart_identity: bool,
    },
    /// `M`: a `pg_logical_emit_message` (sent with the `messages` option).
    Message {
        /// Part of a transaction, rather than sent at once.
        transactional: bool,
        /// Its LSN.
        lsn: Lsn,
        /// Its prefix.
        prefix: String,
        /// Its content.
        content: Vec<u8>,
    },
}

/// A table as a `Relation` message describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    /// The table's OID, as changes name it.
    pub oid: u32,
    /// Its schema (`public`).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `REPLICA IDENTITY`: what an update's or delete's old row holds.
    pub replica_identity: ReplicaIdentity,
    /// Its columns, in order.
    pub columns: Vec<RelationColumn>,
}

/// One column of a [`Relation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationColumn {
    /// Part of the replica identity (the key).
    pub key: bool,
    /// Its name.
    pub name: String,
    /// Its type's OID.
    pub type_oid: u32,
    /// Its type modifier (`numeric(10,2)`, `varchar(20)`), -1 for none.
    pub type_modifier: i32,
}

/// A table's `REPLICA IDENTITY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaIdentity {
    /// `d`: the primary key.
    Default,
    /// `n`: nothing: updates and deletes carry no old row.
    Nothing,
    /// `f`: the whole old row.
    Full,
    /// `i`: the columns of a chosen unique index.
    Index,
}

/// What an update's or delete's old row holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OldRow {
    /// `K`: only the replica identity's columns (others are null); `O`: every column.
    pub key_only: bool,
    /// The values.
    pub tuple: Tuple,
}

/// A row: one datum per column of the relation.
pub type Tuple = Vec<Datum>;

/// One column's value in a [`Tuple`].
#[derive(Clone, PartialEq, Eq)]
pub enum Datum {
    /// `n`: NULL.
    Null,
    /// `u`: a TOASTed value the update did not change, so the server did not send it.
    UnchangedToast,
    /// `t`: the type's text output, in the database's encoding.
    Text(Vec<u8>),
}

/// Text datums show as text (lossy) and at most 60 characters: a TOASTed
/// value would fill a test's failure message.
impl std::fmt::Debug for Datum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Datum::Null => f.write_str("Null"),
            Datum::UnchangedToast => f.write_str("UnchangedToast"),
            Datum::Text(bytes) => {
                let text = String::from_utf8_lossy(bytes);
                let shown: String = text.chars().take(60).collect();
                let more = if shown.len() < text.len() { "…" } else { "" };
                write!(f, "Text({shown:?}{more}, {} bytes)", bytes.len())
            }
        }
    }
}

/// Bytes that are not a protocol version 1 `pgoutput` message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PgOutputError {
    /// The message ends before one of its fields.
    #[error("pgoutput message '{message}' ends at byte {at} before its {field}")]
    Truncated {
        /// The message's type byte.
        message: char,
        /// The field that is missing.
        field: &'static str,
        /// The offset where the bytes end.
        at: usize,
    },
    /// A type byte this decoder does not know (a newer protocol version?).
    #[error("unknown {what} {byte:?} at byte {at} of a pgoutput message")]
    Unknown {
        /// What the byte should say (`message type`, `tuple datum kind`, …).
        what: &'static str,
        /// The byte, as a character.
        byte: char,
        /// Its offset.
        at: usize,
    },
    /// A name that is not UTF-8.
    #[error("pgoutput message '{message}': the {field} at byte {at} is not UTF-8")]
    NotUtf8 {
        /// The message's type byte.
        message: char,
        /// The field.
        field: &'static str,
        /// Its offset.
        at: usize,
    },
    /// Bytes left over after the message.
    #[error("pgoutput message '{message}' has {extra} bytes after its end")]
    Trailing {
        /// The message's type byte.
        message: char,
        /// How many.
        extra: usize,
    },
}

/// Decodes one message.
pub fn decode(bytes: &[u8]) -> Result<Message, PgOutputError> {
    let Some(&kind) = bytes.first() else {
        return Err(PgOutputError::Truncated {
            message: '?',
            field: "type",
            at: 0,
        });
    };
    let mut r = Reader {
        bytes,
        at: 1,
        message: char::from(kind),
    };
    let message = match kind {
        b'B' => Message::Begin {
            final_lsn: Lsn(r.u64("final LSN")?),
            commit_time: r.i64("commit time")?,
            xid: r.u32("xid")?,
        },
        b'C' => {
            r.u8("flags")?;
            Message::Commit {
                commit_lsn: Lsn(r.u64("commit LSN")?),
                end_lsn: Lsn(r.u64("end LSN")?),
                commit_time: r.i64("commit time")?,
            }
        }
        b'O' => Message::Origin {
            lsn: Lsn(r.u64("origin LSN")?),
            name: r.string("origin name")?,
        },
        b'R' => Message::Relation(relation(&mut r)?),
        b'Y' => Message::Type {
            oid: r.u32("type OID")?,
            namespace: r.string("type namespace")?,
            name: r.string("type name")?,
        },
        b'I' => {
            let relation = r.u32("relation OID")?;
            r.expect(b'N', "new tuple marker")?;
            Message::Insert {
                relation,
                new: tuple(&mut r)?,
            }
        }
        b'U' => {
            let relation = r.u32("relation OID")?;
            let old = match r.u8("tuple marker")? {
                b'N' => None,
                marker => {
                    let old = old_row(&mut r, marker)?;
                    r.expect(b'N', "new tuple marker")?;
                    Some(old)
                }
            };
            Message::Update {
                relation,
                old,
                new: tuple(&mut r)?,
            }
        }
        b'D' => {
            let relation = r.u32("relation OID")?;
            let marker = r.u8("old tuple marker")?;
            Message::Delete {
                relation,
                old: old_row(&mut r, marker)?,
            }
        }
        b'T' => {
            let count = r.u32("relation count")?;
            let options = r.u8("options")?;
            let relations = (0..count)
                .map(|_| r.u32("relation OID"))
                .collect::<Result<_, _>>()?;
            Message::Truncate {
                relations,
                cascade: options & 1 != 0,
                restart_identity: options & 2 != 0,
            }
        }
        b'M' => {
            let transactional = r.u8("flags")? & 1 != 0;
            let lsn = Lsn(r.u64("message LSN")?);
            let prefix = r.string("prefix")?;
            let len = r.u32("content length")? as usize;
            Message::Message {
                transactional,
                lsn,
                prefix,
                content: r.take(len, "content")?.to_vec(),
            }
        }
        other => {
            return Err(PgOutputError::Unknown {
                what: "message type",
                byte: char::from(other),
                at: 0,
            });
        }
    };
    r.finish()?;
    Ok(message)
}

fn relation(r: &mut Reader<'_>) -> Result<Relation, PgOutputError> {
    let oid = r.u32("relation OID")?;
    let namespace = r.string("namespace")?;
    let name = r.string("relation name")?;
    let at = r.at;
    let replica_identity = match r.u8("replica identity")? {
        b'd' => ReplicaIdentity::Default,
        b'n' => ReplicaIdentity::Nothing,
        b'f' => ReplicaIdentity::Full,
        b'i' => ReplicaIdentity::Index,
        other => {
            return Err(PgOutputError::Unknown {
                what: "replica identity",
                byte: char::from(other),
                at,
            });
        }
    };
    let count = r.u16("column count")?;
    let columns = (0..count)
        .map(|_| {
            Ok(RelationColumn {
                key: r.u8("column flags")? & 1 != 0,
                name: r.string("column name")?,
                type_oid: r.u32("column type OID")?,
                type_modifier: r.i32("column type modifier")?,
            })
        })
        .collect::<Result<_, PgOutputError>>()?;
    Ok(Relation {
        oid,
        namespace,
        name,
        replica_identity,
        columns,
    })
}

fn old_row(r: &mut Reader<'_>, marker: u8) -> Result<OldRow, PgOutputError> {
    let key_only = match marker {
        b'K' => true,
        b'O' => false,
        other => {
            return Err(PgOutputError::Unknown {
                what: "old tuple marker",
                byte: char::from(other),
                at: r.at - 1,
            });
        }
    };
    Ok(OldRow {
        key_only,
        tuple: tuple(r)?,
    })
}

fn tuple(r: &mut Reader<'_>) -> Result<Tuple, PgOutputError> {
    let count = r.u16("tuple column count")?;
    (0..count)
        .map(|_| {
            let at = r.at;
            match r.u8("datum kind")? {
                b'n' => Ok(Datum::Null),
                b'u' => Ok(Datum::UnchangedToast),
                b't' => {
                    let len = r.u32("datum length")? as usize;
                    Ok(Datum::Text(r.take(len, "datum")?.to_vec()))
                }
                other => Err(PgOutputError::Unknown {
                    what: "tuple datum kind (binary datums need protocol options Tributary does not ask for)",
                    byte: char::from(other),
                    at,
                }),
            }
        })
        .collect()
}

/// A cursor over one message's bytes; every read names the field it wants.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    message: char,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize, field: &'static str) -> Result<&'a [u8], PgOutputError> {
        let end = self
            .at
            .checked_add(len)
            .filter(|end| *end <= self.bytes.len())
            .ok_or(PgOutputError::Truncated {
                message: self.message,
                field,
                at: self.bytes.len(),
            })?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], PgOutputError> {
        Ok(self.take(N, field)?.try_into().expect("N bytes taken"))
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, PgOutputError> {
        Ok(self.take(1, field)?[0])
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, PgOutputError> {
        self.array(field).map(u16::from_be_bytes)
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, PgOutputError> {
        self.array(field).map(u32::from_be_bytes)
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, PgOutputError> {
        self.array(field).map(i32::from_be_bytes)
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, PgOutputError> {
        self.array(field).map(u64::from_be_bytes)
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, PgOutputError> {
        self.array(field).map(i64::from_be_bytes)
    }

    fn expect(&mut self, wanted: u8, field: &'static str) -> Result<(), PgOutputError> {
        let at = self.at;
        match self.u8(field)? {
            byte if byte == wanted => Ok(()),
            other => Err(PgOutputError::Unknown {
                what: field,
                byte: char::from(other),
                at,
            }),
        }
    }

    /// A NUL-terminated UTF-8 string (PostgreSQL names are in the database's
    /// encoding; one that is not UTF-8 is an error, never replaced).
    fn string(&mut self, field: &'static str) -> Result<String, PgOutputError> {
        let start = self.at;
        let len =
            self.bytes[start..]
                .iter()
                .position(|b| *b == 0)
                .ok_or(PgOutputError::Truncated {
                    message: self.message,
                    field,
                    at: self.bytes.len(),
                })?;
        let text = std::str::from_utf8(&self.bytes[start..start + len]).map_err(|_| {
            PgOutputError::NotUtf8 {
                message: self.message,
                field,
                at: start,
            }
        })?;
        self.at = start + len + 1;
        Ok(text.to_owned())
    }

    fn finish(&self) -> Result<(), PgOutputError> {
        match self.bytes.len() - self.at {
            0 => Ok(()),
            extra => Err(PgOutputError::Trailing {
                message: self.message,
                extra,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Messages PostgreSQL 15 sent (`pg_logical_slot_peek_binary_changes`,
    /// `proto_version 1`) for `CREATE TABLE t1 (id int PRIMARY KEY, name
    /// text, n numeric(10,2))`, `INSERT (1, 'a', 1.5)`, then an update of `name`.
    #[test]
    fn messages_postgresql_sent_decode_field_by_field() {
        assert_eq!(
            decode(&hex("42000000000156eed8000304bdefdb5ffe000002e2")).unwrap(),
            Message::Begin {
                final_lsn: "0/156EED8".parse().unwrap(),
                commit_time: 0x0003_04bd_efdb_5ffe,
                xid: 738,
            }
        );
        let relation = decode(&hex("52000040137075626c6963007431006400030169640000000017ffffffff006e616d650000000019ffffffff006e00000006a4000a0006")).unwrap();
        let column = |key, name: &str, type_oid, type_modifier| RelationColumn {
            key,
            name: name.into(),
            type_oid,
            type_modifier,
        };
        assert_eq!(
            relation,
            Message::Relation(Relation {
                oid: 0x4013,
                namespace: "public".into(),
                name: "t1".into(),
                replica_identity: ReplicaIdentity::Default,
                columns: vec![
                    column(true, "id", 23, -1),
                    column(false, "name", 25, -1),
                    // numeric(10,2): (10 << 16 | 2) + 4, as PostgreSQL stores it.
                    column(false, "n", 1700, (10 << 16 | 2) + 4),
                ],
            })
        );
        let text = |s: &str| Datum::Text(s.as_bytes().to_vec());
        assert_eq!(
            decode(&hex(
                "49000040134e00037400000001317400000001617400000004312e3530"
            ))
            .unwrap(),
            Message::Insert {
                relation: 0x4013,
                new: vec![text("1"), text("a"), text("1.50")],
            }
        );
        assert_eq!(
            decode(&hex(
                "55000040134e00037400000001317400000001627400000004312e3530"
            ))
            .unwrap(),
            Message::Update {
                relation: 0x4013,
                old: None,
                new: vec![text("1"), text("b"), text("1.50")],
            }
        );
        assert_eq!(
            decode(&hex("4300000000000156eed8000000000156ef08000304bdefdb5ffe")).unwrap(),
            Message::Commit {
                commit_lsn: "0/156EED8".parse().unwrap(),
                end_lsn: "0/156EF08".parse().unwrap(),
                commit_time: 0x0003_04bd_efdb_5ffe,
            }
        );
    }

    #[test]
    fn old_rows_nulls_and_unchanged_toast() {
        let mut bytes = b"U\0\0\0\x07K\0\x02t\0\0\0\x015n".to_vec();
        bytes.extend_from_slice(b"N\0\x03t\0\0\0\x016nu");
        assert_eq!(
            decode(&bytes).unwrap(),
            Message::Update {
                relation: 7,
                old: Some(OldRow {
                    key_only: true,
                    tuple: vec![Datum::Text(b"5".to_vec()), Datum::Null],
                }),
                new: vec![
                    Datum::Text(b"6".to_vec()),
                    Datum::Null,
                    Datum::UnchangedToast
                ],
            }
        );
        assert_eq!(
            decode(b"D\0\0\0\x07O\0\x01n").unwrap(),
            Message::Delete {
                relation: 7,
                old: OldRow {
                    key_only: false,
                    tuple: vec![Datum::Null],
                },
            }
        );
        assert_eq!(
            decode(b"T\0\0\0\x02\x03\0\0\0\x07\0\0\0\x08").unwrap(),
            Message::Truncate {
                relations: vec![7, 8],
                cascade: true,
                restart_identity: true,
            }
        );
    }

    #[test]
    fn bad_bytes_say_where_and_what() {
        let err = decode(b"I\0\0\0\x07N\0\x01t\0\0\0\x09ab").unwrap_err();
        assert_eq!(
            err,
            PgOutputError::Truncated {
                message: 'I',
                field: "datum",
                at: 15,
            }
        );
        assert!(err.to_string().contains("before its datum"), "{err}");
        let err = decode(b"I\0\0\0\x07N\0\x01b\0\0\0\x01a").unwrap_err();
        assert!(
            matches!(
                err,
                PgOutputError::Unknown {
                    byte: 'b',
                    at: 8,
                    ..
                }
            ),
            "{err}"
        );
        assert!(matches!(
            decode(b"Z").unwrap_err(),
            PgOutputError::Unknown { at: 0, .. }
        ));
        assert_eq!(
            decode(b"D\0\0\0\x07K\0\0!").unwrap_err(),
            PgOutputError::Trailing {
                message: 'D',
                extra: 1
            }
        );
        assert!(matches!(
            decode(b"Y\0\0\0\x01pub\xfflic\0t\0").unwrap_err(),
            PgOutputError::NotUtf8 {
                field: "type namespace",
                at: 5,
                ..
            }
        ));
        assert!(decode(b"").is_err());
    }
}
