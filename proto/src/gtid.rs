//! MariaDB GTIDs (`domain-server-sequence`) and the newest one applied per domain.
//!
//! Sequence numbers grow within a replication domain, whichever server wrote
//! them, so "has applied `0-1-42`" means "has applied a change of domain 0 with
//! sequence 42 or later".

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// One MariaDB GTID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gtid {
    /// Replication domain.
    pub domain: u32,
    /// Server id that wrote the transaction.
    pub server: u32,
    /// Sequence number within the domain.
    pub sequence: u64,
}

impl FromStr for Gtid {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad =
            || format!("{text:?} is not a MariaDB GTID (domain-server-sequence, e.g. 0-1-42)");
        let mut parts = text.trim().split('-');
        let (Some(domain), Some(server), Some(sequence), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        Ok(Gtid {
            domain: domain.parse().map_err(|_| bad())?,
            server: server.parse().map_err(|_| bad())?,
            sequence: sequence.parse().map_err(|_| bad())?,
        })
    }
}

impl fmt::Display for Gtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server, self.sequence)
    }
}

/// The newest GTID applied in each replication domain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppliedGtids(BTreeMap<u32, Gtid>);

impl AppliedGtids {
    /// Records an applied GTID (older ones of its domain are forgotten).
    pub fn apply(&mut self, gtid: Gtid) {
        let newest = self.0.entry(gtid.domain).or_insert(gtid);
        if gtid.sequence > newest.sequence {
            *newest = gtid;
        }
    }

    /// Records every GTID of `other`.
    pub fn merge(&mut self, other: &AppliedGtids) {
        for gtid in other.0.values() {
            self.apply(*gtid);
        }
    }

    /// Whether a change at or after `gtid` (in its domain) has been applied.
    pub fn reached(&self, gtid: &Gtid) -> bool {
        self.0
            .get(&gtid.domain)
            .is_some_and(|newest| newest.sequence >= gtid.sequence)
    }

    /// Whether nothing has been recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The newest GTID of each domain, as text.
    pub fn to_strings(&self) -> Vec<String> {
        self.0.values().map(Gtid::to_string).collect()
    }

    /// Parses what [`AppliedGtids::to_strings`] wrote.
    pub fn from_strings<S: AsRef<str>>(texts: &[S]) -> Result<Self, String> {
        let mut applied = AppliedGtids::default();
        for text in texts {
            applied.apply(text.as_ref().parse()?);
        }
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let g: Gtid = "0-1-42".parse().unwrap();
        assert_eq!(
            g,
            Gtid {
                domain: 0,
                server: 1,
                sequence: 42
            }
        );
        assert_eq!(g.to_string(), "0-1-42");
        for bad in ["", "0-1", "0-1-2-3", "a-1-2", "0-1-x", "0--1"] {
            assert!(bad.parse::<Gtid>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn reached_compares_sequences_within_a_domain() {
        let mut applied = AppliedGtids::default();
        applied.apply("0-1-10".parse().unwrap());
        applied.apply("0-2-7".parse().unwrap()); // older, other server
        applied.apply("3-1-5".parse().unwrap());
        assert!(applied.reached(&"0-9-10".parse().unwrap()));
        assert!(applied.reached(&"0-1-3".parse().unwrap()));
        assert!(!applied.reached(&"0-1-11".parse().unwrap()));
        assert!(
            !applied.reached(&"1-1-1".parse().unwrap()),
            "unknown domain"
        );
        assert_eq!(applied.to_strings(), ["0-1-10", "3-1-5"]);
        assert_eq!(
            AppliedGtids::from_strings(&applied.to_strings()).unwrap(),
            applied
        );
    }
}
