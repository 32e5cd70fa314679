//! GTIDs of MariaDB (`domain-server-sequence`) and MySQL
//! (`source_uuid[:tag]:transaction`), and the newest one applied per stream.
//!
//! A *stream* is what orders GTIDs. In MariaDB it is the replication domain:
//! sequence numbers grow within a domain, whichever server wrote them, so "has
//! applied `0-1-42`" means "has applied a change of domain 0 with sequence 42 or
//! later". In MySQL it is the source that numbered the transaction (its server
//! UUID, and the tag of a tagged GTID on MySQL 8.4+): "has applied
//! `3e11fa47-71ca-11e1-9e33-c80aa9429562:23`" means "has applied that source's
//! transaction 23 or a later one of it".

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use uuid::Uuid;

/// One transaction's GTID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gtid {
    /// MariaDB: `domain-server-sequence`.
    MariaDb {
        /// Replication domain.
        domain: u32,
        /// Server id that wrote the transaction.
        server: u32,
        /// Sequence number within the domain.
        sequence: u64,
    },
    /// MySQL: `source_uuid:transaction` or, tagged (8.4+), `source_uuid:tag:transaction`.
    MySql {
        /// The source that numbered the transaction.
        source: MySqlSource,
        /// The transaction number (GNO), from 1.
        transaction: u64,
    },
}

/// What numbers MySQL transactions: a server UUID and, for tagged GTIDs, a tag.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MySqlSource {
    /// The server UUID.
    pub uuid: Uuid,
    /// The tag (lower case, as MySQL compares tags), if any.
    pub tag: Option<Arc<str>>,
}

impl MySqlSource {
    /// A source from a UUID's text and an optional tag's text.
    pub fn parse(uuid: &str, tag: Option<&str>) -> Result<Self, GtidError> {
        let uuid = Uuid::try_parse(uuid.trim()).map_err(|_| GtidError::Uuid(uuid.to_owned()))?;
        let tag = tag.map(parse_tag).transpose()?;
        Ok(MySqlSource { uuid, tag })
    }
}

/// A MySQL GTID tag: 1 to 32 letters, digits or underscores, not starting
/// with a digit; compared without case, so kept in lower case.
fn parse_tag(text: &str) -> Result<Arc<str>, GtidError> {
    let valid_start = text
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let valid_rest = text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid_start && valid_rest && text.len() <= 32 {
        Ok(text.to_ascii_lowercase().into())
    } else {
        Err(GtidError::Tag(text.to_owned()))
    }
}

impl fmt::Display for MySqlSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.uuid.hyphenated())?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        Ok(())
    }
}

/// What orders GTIDs: a MariaDB domain or a MySQL source.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stream {
    /// A MariaDB replication domain.
    Domain(u32),
    /// A MySQL source.
    Source(MySqlSource),
}

impl Gtid {
    /// The stream whose order this GTID has its place in.
    pub fn stream(&self) -> Stream {
        match self {
            Gtid::MariaDb { domain, .. } => Stream::Domain(*domain),
            Gtid::MySql { source, .. } => Stream::Source(source.clone()),
        }
    }

    /// The GTID's number within its stream.
    pub fn sequence(&self) -> u64 {
        match self {
            Gtid::MariaDb { sequence, .. } => *sequence,
            Gtid::MySql { transaction, .. } => *transaction,
        }
    }
}

/// Text that is not a GTID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GtidError {
    /// Neither of the forms GTIDs are written in.
    #[error(
        "{0:?} is not a GTID: MariaDB's are domain-server-sequence (e.g. 0-1-42), \
         MySQL's source_uuid:transaction (e.g. 3e11fa47-71ca-11e1-9e33-c80aa9429562:23) \
         or source_uuid:tag:transaction"
    )]
    Form(String),
    /// A MySQL GTID whose source is not a UUID with an optional tag.
    #[error("{text:?} is not a GTID: {source}")]
    Source {
        /// The whole text.
        text: String,
        /// What is wrong with its source.
        source: Box<GtidError>,
    },
    /// Not a server UUID.
    #[error("{0:?} is not a server UUID")]
    Uuid(String),
    /// Not a GTID tag.
    #[error("{0:?} is not a GTID tag (1 to 32 letters, digits or _, not starting with a digit)")]
    Tag(String),
}

impl FromStr for Gtid {
    type Err = GtidError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let bad = || GtidError::Form(text.to_owned());
        if let Some((source, transaction)) = text.rsplit_once(':') {
            let (uuid, tag) = match source.split_once(':') {
                Some((uuid, tag)) => (uuid, Some(tag)),
                None => (source, None),
            };
            let source = MySqlSource::parse(uuid, tag).map_err(|e| GtidError::Source {
                text: text.to_owned(),
                source: Box::new(e),
            })?;
            let transaction = transaction
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(bad)?;
            return Ok(Gtid::MySql {
                source,
                transaction,
            });
        }
        let mut parts = text.split('-');
        let (Some(domain), Some(server), Some(sequence), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        Ok(Gtid::MariaDb {
            domain: domain.parse().map_err(|_| bad())?,
            server: server.parse().map_err(|_| bad())?,
            sequence: sequence.parse().map_err(|_| bad())?,
        })
    }
}

impl fmt::Display for Gtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Gtid::MariaDb {
                domain,
                server,
                sequence,
            } => write!(f, "{domain}-{server}-{sequence}"),
            Gtid::MySql {
                source,
                transaction,
            } => write!(f, "{source}:{transaction}"),
        }
    }
}

/// The newest GTID applied in each stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppliedGtids(BTreeMap<Stream, Gtid>);

impl AppliedGtids {
    /// Records an applied GTID (older ones of its stream are forgotten).
    pub fn apply(&mut self, gtid: &Gtid) {
        match self.0.get_mut(&gtid.stream()) {
            Some(newest) if newest.sequence() >= gtid.sequence() => {}
            Some(newest) => *newest = gtid.clone(),
            None => {
                self.0.insert(gtid.stream(), gtid.clone());
            }
        }
    }

    /// Records every GTID of `other`.
    pub fn merge(&mut self, other: &AppliedGtids) {
        for gtid in other.0.values() {
            self.apply(gtid);
        }
    }

    /// Whether a change at or after `gtid` (in its stream) has been applied.
    pub fn reached(&self, gtid: &Gtid) -> bool {
        self.0
            .get(&gtid.stream())
            .is_some_and(|newest| newest.sequence() >= gtid.sequence())
    }

    /// Whether nothing has been recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The newest GTID of each stream, as text.
    pub fn to_strings(&self) -> Vec<String> {
        self.0.values().map(Gtid::to_string).collect()
    }

    /// Parses what [`AppliedGtids::to_strings`] wrote.
    pub fn from_strings<S: AsRef<str>>(texts: &[S]) -> Result<Self, GtidError> {
        let mut applied = AppliedGtids::default();
        for text in texts {
            applied.apply(&text.as_ref().parse()?);
        }
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";

    fn gtid(text: &str) -> Gtid {
        text.parse().unwrap()
    }

    #[test]
    fn parses_and_prints_mariadb_gtids() {
        assert_eq!(
            gtid("0-1-42"),
            Gtid::MariaDb {
                domain: 0,
                server: 1,
                sequence: 42
            }
        );
        assert_eq!(gtid("0-1-42").to_string(), "0-1-42");
        for bad in ["", "0-1", "0-1-2-3", "a-1-2", "0-1-x", "0--1"] {
            assert!(bad.parse::<Gtid>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn parses_and_prints_mysql_gtids() {
        let upper = format!("{}:23", UUID.to_uppercase());
        let parsed = gtid(&upper);
        let Gtid::MySql {
            source,
            transaction,
        } = &parsed
        else {
            panic!("{parsed:?}")
        };
        assert_eq!(*transaction, 23);
        assert_eq!(source.uuid.as_bytes()[..2], [0x3e, 0x11]);
        assert_eq!(source.tag, None);
        assert_eq!(
            parsed.to_string(),
            format!("{UUID}:23"),
            "lower case, as MySQL prints it"
        );
        let tagged = gtid(&format!("{UUID}:Orders_2:7"));
        assert_eq!(tagged.to_string(), format!("{UUID}:orders_2:7"));
        assert_eq!(tagged.sequence(), 7);
        assert_ne!(
            tagged.stream(),
            parsed.stream(),
            "a tag is a stream of its own"
        );
        for bad in [
            format!("{UUID}:0"),
            format!("{UUID}:x"),
            format!("{UUID}:"),
            format!("{UUID}:9tag:1"),
            format!("{UUID}:a-b:1"),
            format!("{UUID}:{}:1", "t".repeat(33)),
            "3e11fa47-71ca:5".to_owned(),
            format!("{UUID}:1-5"),
        ] {
            let err = bad.parse::<Gtid>().unwrap_err().to_string();
            assert!(err.contains("is not a GTID"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn reached_compares_sequences_within_a_domain() {
        let mut applied = AppliedGtids::default();
        applied.apply(&gtid("0-1-10"));
        applied.apply(&gtid("0-2-7")); // older, other server
        applied.apply(&gtid("3-1-5"));
        assert!(applied.reached(&gtid("0-9-10")));
        assert!(applied.reached(&gtid("0-1-3")));
        assert!(!applied.reached(&gtid("0-1-11")));
        assert!(!applied.reached(&gtid("1-1-1")), "unknown domain");
        assert_eq!(applied.to_strings(), ["0-1-10", "3-1-5"]);
        assert_eq!(
            AppliedGtids::from_strings(&applied.to_strings()).unwrap(),
            applied
        );
    }

    #[test]
    fn reached_compares_transactions_within_a_mysql_source() {
        let other = "8f5ad0c4-1f6e-11ef-a1c2-0242ac120002";
        let mut applied = AppliedGtids::default();
        applied.apply(&gtid(&format!("{UUID}:100")));
        applied.apply(&gtid(&format!("{UUID}:99"))); // older
        applied.apply(&gtid(&format!("{UUID}:batch:4")));
        applied.apply(&gtid(&format!("{other}:2")));
        assert!(applied.reached(&gtid(&format!("{UUID}:100"))));
        assert!(applied.reached(&gtid(&format!("{}:57", UUID.to_uppercase()))));
        assert!(!applied.reached(&gtid(&format!("{UUID}:101"))));
        assert!(applied.reached(&gtid(&format!("{UUID}:BATCH:4"))));
        assert!(!applied.reached(&gtid(&format!("{UUID}:batch:5"))));
        assert!(
            !applied.reached(&gtid(&format!("{UUID}:other:1"))),
            "unknown tag"
        );
        assert!(!applied.reached(&gtid("0-1-1")), "unknown domain");
        let texts = applied.to_strings();
        assert_eq!(texts.len(), 3, "{texts:?}");
        assert_eq!(AppliedGtids::from_strings(&texts).unwrap(), applied);
    }
}
