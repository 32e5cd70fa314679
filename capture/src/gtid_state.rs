//! The GTID state stored with every position, handed to the server to resume:
//! MariaDB's last GTID per replication domain (the form of `@@gtid_binlog_pos`)
//! or MySQL's executed GTID set (the form of `@@gtid_executed`).

use std::collections::BTreeMap;
use std::fmt;

use tributary_proto::gtid::{Gtid, MySqlSource};

/// What the server has sent up to a position, in GTIDs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum GtidState {
    /// No GTID known.
    #[default]
    Empty,
    /// MariaDB: the last GTID of each domain, as `domain → (server, sequence)`.
    MariaDb(BTreeMap<u32, (u32, u64)>),
    /// MySQL: every transaction executed.
    MySql(GtidSet),
}

/// Text that is not a GTID state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GtidStateError {
    /// A part of a MariaDB state that is not a MariaDB GTID.
    #[error("{0:?} is not a MariaDB GTID (domain-server-sequence)")]
    MariaDb(String),
    /// A part of a MySQL GTID set that cannot be read.
    #[error("{part:?} is not part of a MySQL GTID set: {problem}")]
    MySql {
        /// The source and its intervals, as written.
        part: String,
        /// What is wrong with it.
        problem: String,
    },
}

impl GtidState {
    /// Parses `domain-server-seq[,…]` (MariaDB) or a MySQL GTID set
    /// (`uuid:1-5:7[,uuid2:tag:1-3…]`); empty text is the empty state.
    pub fn parse(text: &str) -> Result<Self, GtidStateError> {
        if text.trim().is_empty() {
            Ok(GtidState::Empty)
        } else if text
            .chars()
            .all(|c| c.is_ascii_digit() || c == '-' || c == ',' || c.is_whitespace())
        {
            parse_mariadb(text).map(GtidState::MariaDb)
        } else {
            GtidSet::parse(text).map(GtidState::MySql)
        }
    }

    /// Records a transaction's GTID.
    pub fn advance(&mut self, gtid: &Gtid) {
        match (&mut *self, gtid) {
            (
                GtidState::MariaDb(domains),
                Gtid::MariaDb {
                    domain,
                    server,
                    sequence,
                },
            ) => {
                domains.insert(*domain, (*server, *sequence));
            }
            (GtidState::MySql(set), Gtid::MySql { .. }) => set.add(gtid),
            // A server does not change between GTID kinds; the first GTID sets the kind.
            (_, Gtid::MariaDb { .. }) => {
                *self = GtidState::MariaDb(BTreeMap::new());
                self.advance(gtid);
            }
            (_, Gtid::MySql { .. }) => {
                *self = GtidState::MySql(GtidSet::default());
                self.advance(gtid);
            }
        }
    }

    /// Whether no GTID is known.
    pub fn is_empty(&self) -> bool {
        match self {
            GtidState::Empty => true,
            GtidState::MariaDb(domains) => domains.is_empty(),
            GtidState::MySql(set) => set.is_empty(),
        }
    }
}

fn parse_mariadb(text: &str) -> Result<BTreeMap<u32, (u32, u64)>, GtidStateError> {
    let mut domains = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.parse::<Gtid>() {
            Ok(Gtid::MariaDb {
                domain,
                server,
                sequence,
            }) => {
                domains.insert(domain, (server, sequence));
            }
            _ => return Err(GtidStateError::MariaDb(part.to_owned())),
        }
    }
    Ok(domains)
}

impl fmt::Display for GtidState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GtidState::Empty => Ok(()),
            GtidState::MariaDb(domains) => {
                for (i, (domain, (server, seq))) in domains.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{domain}-{server}-{seq}")?;
                }
                Ok(())
            }
            GtidState::MySql(set) => set.fmt(f),
        }
    }
}

/// A MySQL GTID set: per source, the transaction numbers as sorted, disjoint,
/// non-adjacent inclusive intervals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GtidSet(BTreeMap<MySqlSource, Vec<(u64, u64)>>);

impl GtidSet {
    /// Parses MySQL's text form: sources separated by commas, each a UUID followed
    /// by `:`-separated intervals (`1-5`, `7`), where a tag (MySQL 8.4+) applies
    /// to the intervals after it (`uuid:1-5:batch:1-3`). Whitespace and line
    /// breaks (as `@@gtid_executed` prints long sets) are ignored.
    pub fn parse(text: &str) -> Result<Self, GtidStateError> {
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let mut set = GtidSet::default();
        for part in compact.split(',').filter(|p| !p.is_empty()) {
            let bad = |problem: String| GtidStateError::MySql {
                part: part.to_owned(),
                problem,
            };
            let mut fields = part.split(':');
            let uuid = fields.next().unwrap_or_default();
            let mut source = MySqlSource::parse(uuid, None).map_err(|e| bad(e.to_string()))?;
            let mut intervals = 0;
            for field in fields {
                if field.starts_with(|c: char| c.is_ascii_digit()) {
                    let (start, end) = parse_interval(field).ok_or_else(|| {
                        bad(format!(
                            "{field:?} is not an interval of transaction numbers \
                             (N or N-M, from 1, ascending)"
                        ))
                    })?;
                    set.add_range(&source, start, end);
                    intervals += 1;
                } else {
                    source =
                        MySqlSource::parse(uuid, Some(field)).map_err(|e| bad(e.to_string()))?;
                }
            }
            if intervals == 0 {
                return Err(bad("no transaction numbers".into()));
            }
        }
        Ok(set)
    }

    /// Adds one transaction (a MariaDB GTID is ignored: it has no place here).
    pub fn add(&mut self, gtid: &Gtid) {
        if let Gtid::MySql {
            source,
            transaction,
        } = gtid
        {
            self.add_range(source, *transaction, *transaction);
        }
    }

    /// Adds the transactions `start..=end` of `source`.
    pub fn add_range(&mut self, source: &MySqlSource, start: u64, end: u64) {
        let intervals = self.0.entry(source.clone()).or_default();
        // Every interval that overlaps or touches [start, end] merges into it.
        let first = intervals.partition_point(|&(_, e)| e.saturating_add(1) < start);
        let last = intervals.partition_point(|&(s, _)| s <= end.saturating_add(1));
        let merged = intervals[first..last]
            .iter()
            .fold((start, end), |(s, e), &(a, b)| (s.min(a), e.max(b)));
        intervals.splice(first..last, [merged]);
    }

    /// Whether the set holds no transaction.
    pub fn is_empty(&self) -> bool {
        self.0.values().all(Vec::is_empty)
    }

    /// Each source with its intervals (inclusive).
    pub fn sources(&self) -> impl Iterator<Item = (&MySqlSource, &[(u64, u64)])> {
        self.0.iter().map(|(source, i)| (source, i.as_slice()))
    }
}

/// `N` or `N-M`: transaction numbers from 1, in ascending order.
fn parse_interval(text: &str) -> Option<(u64, u64)> {
    let number = |n: &str| n.parse::<u64>().ok().filter(|&n| n > 0);
    let (start, end) = match text.split_once('-') {
        Some((start, end)) => (number(start)?, number(end)?),
        None => (number(text)?, number(text)?),
    };
    (start <= end).then_some((start, end))
}

impl fmt::Display for GtidSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (source, intervals) in self.sources().filter(|(_, i)| !i.is_empty()) {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{source}")?;
            for &(start, end) in intervals {
                if start == end {
                    write!(f, ":{start}")?;
                } else {
                    write!(f, ":{start}-{end}")?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    const B: &str = "8f5ad0c4-1f6e-11ef-a1c2-0242ac120002";

    fn gtid(text: &str) -> Gtid {
        text.parse().unwrap()
    }

    #[test]
    fn mariadb_state_round_trips_and_advances() {
        let mut s = GtidState::parse("1-2-30, 0-1-5").unwrap();
        assert_eq!(s.to_string(), "0-1-5,1-2-30");
        s.advance(&gtid("0-3-6"));
        assert_eq!(s.to_string(), "0-3-6,1-2-30");
        assert!(GtidState::parse("").unwrap().is_empty());
        assert_eq!(
            GtidState::parse("0-1"),
            Err(GtidStateError::MariaDb("0-1".into()))
        );
        let mut empty = GtidState::Empty;
        empty.advance(&gtid("2-1-9"));
        assert_eq!(empty.to_string(), "2-1-9");
    }

    #[test]
    fn mysql_set_parses_what_mysql_prints() {
        let printed = format!("{}:1-5:7,\n{B}:1-3:batch:1-2:4", A.to_uppercase());
        let state = GtidState::parse(&printed).unwrap();
        assert_eq!(
            state.to_string(),
            format!("{A}:1-5:7,{B}:1-3,{B}:batch:1-2:4"),
            "sources in UUID order, tags as sources of their own"
        );
        assert_eq!(GtidState::parse(&state.to_string()).unwrap(), state);
        for bad in [
            A.to_owned(),
            format!("{A}:"),
            format!("{A}:0-3"),
            format!("{A}:5-3"),
            format!("{A}:1-x"),
            format!("{A}:batch"),
            format!("{A}:9tag:1"),
            "nope:1-3".to_owned(),
        ] {
            let err = GtidState::parse(&bad).unwrap_err().to_string();
            assert!(err.contains("MySQL GTID set"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn mysql_set_merges_transactions_into_intervals() {
        let mut state = GtidState::parse(&format!("{A}:1-5:10-12")).unwrap();
        for n in [6, 8, 9, 14] {
            state.advance(&gtid(&format!("{A}:{n}")));
        }
        assert_eq!(state.to_string(), format!("{A}:1-6:8-12:14"));
        state.advance(&gtid(&format!("{A}:7")));
        state.advance(&gtid(&format!("{A}:13")));
        state.advance(&gtid(&format!("{A}:3")));
        assert_eq!(
            state.to_string(),
            format!("{A}:1-14"),
            "7 and 13 join everything"
        );
        state.advance(&gtid(&format!("{B}:T1:1")));
        assert_eq!(state.to_string(), format!("{A}:1-14,{B}:t1:1"));
        let mut empty = GtidState::Empty;
        empty.advance(&gtid(&format!("{B}:40")));
        assert_eq!(empty.to_string(), format!("{B}:40"));
        assert!(!empty.is_empty());
    }
}
