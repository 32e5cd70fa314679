//! Debezium's `column.*` properties, under their names (`columns:` in the
//! capture config): which columns an event's value carries
//! (`column.include.list` / `column.exclude.list`), and which are truncated
//! (`column.truncate.to.N.chars`), masked (`column.mask.with.N.chars`) or
//! hashed (`column.mask.hash[.v2].<algorithm>.with.salt.<salt>`). Each value
//! is a comma-separated list of regular expressions matched, whole and
//! ignoring case, against `<db>.<table>.<column>`.
//!
//! As in Debezium: the key keeps its columns as decoded (excluded or masked
//! ones too); the first rule that matches a column is its mapper, truncation
//! rules first, then masks, then hashes; masks and hashes apply to text
//! columns (ENUM and SET included) only.

use std::collections::BTreeMap;
use std::sync::Arc;

use regex::{Regex, RegexBuilder};
use tributary_config::ConfigError;

use crate::schema::{ColumnKind, Declared, InfoColumn, TableSchema};
use crate::value_plan::{HashAlgorithm, Hashing, Mapper, PlannedColumn, ValuePlan};

/// The `columns:` section: Debezium's `column.*` property names and values.
pub type ColumnsConfig = BTreeMap<String, String>;

/// The rules of a `columns:` section, checked.
#[derive(Debug, Clone, Default)]
pub struct ColumnRules {
    include: Option<Vec<Regex>>,
    exclude: Vec<Regex>,
    /// In the order they are tried.
    mappers: Vec<(Vec<Regex>, RuleMapper)>,
}

#[derive(Clone)]
enum RuleMapper {
    Truncate(usize),
    Mask(usize),
    Hash {
        algorithm: HashAlgorithm,
        salt: Arc<[u8]>,
        v2: bool,
    },
}

impl std::fmt::Debug for RuleMapper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuleMapper::Truncate(n) => write!(f, "Truncate({n})"),
            RuleMapper::Mask(n) => write!(f, "Mask({n})"),
            // The salt is a secret.
            RuleMapper::Hash { algorithm, v2, .. } => write!(f, "Hash({algorithm:?}, v2: {v2})"),
        }
    }
}

impl RuleMapper {
    /// Tried in this order (Debezium's `ColumnMappers.create`).
    fn rank(&self) -> u8 {
        match self {
            RuleMapper::Truncate(_) => 0,
            RuleMapper::Mask(_) => 1,
            RuleMapper::Hash { v2: false, .. } => 2,
            RuleMapper::Hash { v2: true, .. } => 3,
        }
    }
}

/// The name a property is reported under: a hash's salt is a secret, never shown.
fn field_name(key: &str) -> String {
    match key.find(".with.salt.") {
        Some(at) => format!("columns.{}.with.salt.<not shown>", &key[..at]),
        None => format!("columns.{key}"),
    }
}

fn patterns(field: &str, list: &str) -> Result<Vec<Regex>, ConfigError> {
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            RegexBuilder::new(&format!("^(?:{p})$"))
                .case_insensitive(true)
                .build()
                .map_err(|e| ConfigError::new(field, format!("invalid pattern {p:?}: {e}")))
        })
        .collect()
}

/// `N` of `<prefix>N<suffix>`.
fn count(key: &str, prefix: &str, suffix: &str) -> Option<Result<usize, ()>> {
    let n = key.strip_prefix(prefix)?.strip_suffix(suffix)?;
    Some(n.parse().map_err(drop))
}

impl ColumnRules {
    /// Checks a `columns:` section; an error names the property (never a salt).
    pub fn parse(config: &ColumnsConfig) -> Result<Self, ConfigError> {
        let mut rules = ColumnRules::default();
        for (key, list) in config {
            let field = field_name(key);
            let list = patterns(&field, list)?;
            let bad = |problem: &str| ConfigError::new(&field, problem.to_owned());
            let mapper = if key == "column.include.list" {
                rules.include = Some(list);
                continue;
            } else if key == "column.exclude.list" {
                rules.exclude = list;
                continue;
            } else if let Some(n) = count(key, "column.truncate.to.", ".chars") {
                RuleMapper::Truncate(n.map_err(|()| bad("N must be a whole number"))?)
            } else if let Some(n) = count(key, "column.mask.with.", ".chars") {
                RuleMapper::Mask(n.map_err(|()| bad("N must be a whole number"))?)
            } else if let Some(rest) = key.strip_prefix("column.mask.hash.") {
                let (v2, rest) = match rest.strip_prefix("v2.") {
                    Some(rest) => (true, rest),
                    None => (false, rest),
                };
                let (name, salt) = rest.split_once(".with.salt.").ok_or_else(|| {
                    bad("must be column.mask.hash[.v2].<algorithm>.with.salt.<salt>")
                })?;
                let algorithm = HashAlgorithm::ALL
                    .iter()
                    .find(|(java, _)| java.eq_ignore_ascii_case(name))
                    .map(|(_, a)| *a)
                    .ok_or_else(|| {
                        let names: Vec<&str> = HashAlgorithm::ALL.iter().map(|(n, _)| *n).collect();
                        ConfigError::new(
                            &field,
                            format!(
                                "unknown algorithm {name:?}: use one of {}",
                                names.join(", ")
                            ),
                        )
                    })?;
                RuleMapper::Hash {
                    algorithm,
                    salt: Arc::from(salt.as_bytes()),
                    v2,
                }
            } else {
                return Err(bad(
                    "is not one of column.include.list, column.exclude.list, \
                     column.truncate.to.N.chars, column.mask.with.N.chars, \
                     column.mask.hash[.v2].<algorithm>.with.salt.<salt>",
                ));
            };
            rules.mappers.push((list, mapper));
        }
        if rules.include.is_some() && !rules.exclude.is_empty() {
            return Err(ConfigError::new(
                "columns.column.exclude.list",
                "cannot be set with column.include.list (as in Debezium)".to_owned(),
            ));
        }
        rules.mappers.sort_by_key(|(_, m)| m.rank());
        Ok(rules)
    }

    /// No rule at all.
    pub fn is_empty(&self) -> bool {
        self.include.is_none() && self.exclude.is_empty() && self.mappers.is_empty()
    }

    /// There are hash or truncation rules: [`Self::attach`] needs the
    /// columns' declared lengths (a digest is cut to its column's length, and
    /// a column no longer than the truncation is left alone, as in Debezium).
    pub fn needs_lengths(&self) -> bool {
        self.mappers
            .iter()
            .any(|(_, mapper)| matches!(mapper, RuleMapper::Hash { .. } | RuleMapper::Truncate(_)))
    }

    /// `table` with the value plan these rules give it; `info` holds the
    /// columns' declared lengths (for hashes).
    pub fn attach(&self, mut table: TableSchema, info: Option<&[InfoColumn]>) -> TableSchema {
        if self.is_empty() {
            return table;
        }
        let mut names = Vec::new();
        let mut columns = Vec::new();
        for (i, column) in table.columns.iter().enumerate() {
            let full = format!("{}.{}.{}", table.db, table.table, column.name);
            let kept = match &self.include {
                Some(include) => include.iter().any(|p| p.is_match(&full)),
                None => !self.exclude.iter().any(|p| p.is_match(&full)),
            };
            if !kept {
                continue;
            }
            let text = matches!(
                (&column.kind, &column.declared),
                (
                    ColumnKind::Text(_) | ColumnKind::Enum(_) | ColumnKind::Set(_),
                    _
                ) | (_, Declared::Enum(_) | Declared::Set(_))
            );
            let length = info
                .and_then(|info| info.get(i))
                .and_then(|c| c.char_length);
            let mapper = self
                .mappers
                .iter()
                .find(|(patterns, _)| patterns.iter().any(|p| p.is_match(&full)))
                .and_then(|(_, mapper)| match mapper {
                    // Nothing to cut in a column declared no longer.
                    RuleMapper::Truncate(n) => length
                        .is_none_or(|length| length > *n)
                        .then_some(Mapper::Truncate(*n)),
                    RuleMapper::Mask(n) => text.then_some(Mapper::Mask(*n)),
                    RuleMapper::Hash {
                        algorithm,
                        salt,
                        v2,
                    } => text.then(|| {
                        Mapper::Hash(Hashing {
                            algorithm: *algorithm,
                            salt: salt.clone(),
                            v2: *v2,
                            max_chars: length,
                        })
                    }),
                });
            names.push(column.name.clone());
            columns.push(PlannedColumn {
                index: i,
                mapper,
                null_default: None,
            });
        }
        table.value_plan = Some(Arc::new(ValuePlan {
            names: names.into(),
            columns,
        }));
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::column_default::DefaultExpr;

    fn rules(pairs: &[(&str, &str)]) -> Result<ColumnRules, ConfigError> {
        ColumnRules::parse(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn info(name: &str, column_type: &str, char_length: Option<usize>) -> InfoColumn {
        let text = column_type.starts_with("varchar");
        InfoColumn {
            name: name.into(),
            column_type: column_type.into(),
            charset: text.then(|| "utf8mb4".into()),
            collation: text.then(|| "utf8mb4_general_ci".into()),
            key_position: (name == "id").then_some(1),
            nullable: name != "id",
            char_length,
            default: DefaultExpr::None,
        }
    }

    fn users() -> (TableSchema, Vec<InfoColumn>) {
        let info = vec![
            info("id", "int(11)", None),
            info("email", "varchar(20)", Some(20)),
            info("ssn", "varchar(11)", Some(11)),
            info("bio", "varchar(200)", Some(200)),
            info("age", "int(11)", None),
        ];
        (TableSchema::from_info_columns("shop", "users", &info), info)
    }

    #[test]
    fn exclusions_masks_hashes_and_truncations() {
        let rules = rules(&[
            ("column.exclude.list", "shop.users.age"),
            (
                "column.mask.with.4.chars",
                "shop\\.users\\.ssn, shop.users.age",
            ),
            (
                "column.mask.hash.SHA-256.with.salt.pepper",
                "shop.users.email",
            ),
            (
                "column.truncate.to.5.chars",
                "SHOP.USERS.BIO, shop.users.ssn",
            ),
        ])
        .unwrap();
        let (table, info) = users();
        assert!(rules.needs_lengths());
        let table = rules.attach(table, Some(&info));
        let plan = table.value_plan.as_ref().unwrap();
        assert_eq!(&*plan.names, ["id", "email", "ssn", "bio"]);
        let mappers: Vec<Option<&Mapper>> =
            plan.columns.iter().map(|c| c.mapper.as_ref()).collect();
        assert_eq!(mappers[0], None);
        assert!(matches!(mappers[1], Some(Mapper::Hash(h)) if h.max_chars == Some(20) && !h.v2));
        // Truncation is tried before the mask, as in Debezium.
        assert_eq!(mappers[2], Some(&Mapper::Truncate(5)));
        assert_eq!(mappers[3], Some(&Mapper::Truncate(5)));
    }

    #[test]
    fn the_first_matching_rule_decides_even_when_it_does_nothing() {
        // email is VARCHAR(20): a truncation to 30 leaves it alone, and, being
        // the first rule that matches, keeps the hash off it (as in Debezium).
        let rules = rules(&[
            ("column.truncate.to.30.chars", "shop.users.(email|bio)"),
            (
                "column.mask.hash.SHA-256.with.salt.pepper",
                "shop.users.email",
            ),
        ])
        .unwrap();
        let (table, info) = users();
        let table = rules.attach(table, Some(&info));
        let plan = table.value_plan.as_ref().unwrap();
        assert_eq!(plan.columns[1].mapper, None);
        assert_eq!(
            plan.columns[3].mapper,
            Some(Mapper::Truncate(30)),
            "bio is VARCHAR(200)"
        );
        // Without the declared lengths, a truncation is kept.
        let table = rules.attach(users().0, None);
        assert_eq!(
            table.value_plan.as_ref().unwrap().columns[1].mapper,
            Some(Mapper::Truncate(30))
        );
    }

    #[test]
    fn an_include_list_keeps_only_its_columns_and_masks_only_text() {
        let rules = rules(&[
            ("column.include.list", "shop.users.(id|age|bio)"),
            ("column.mask.with.2.chars", "shop.users.*"),
        ])
        .unwrap();
        let table = rules.attach(users().0, None);
        let plan = table.value_plan.as_ref().unwrap();
        assert_eq!(&*plan.names, ["id", "bio", "age"]);
        assert_eq!(plan.columns[0].mapper, None, "an INT is not masked");
        assert_eq!(plan.columns[1].mapper, Some(Mapper::Mask(2)));
        assert_eq!(table.key_names.as_ref(), ["id"], "the key is untouched");
    }

    #[test]
    fn errors_name_the_property_and_never_the_salt() {
        let err = rules(&[("column.mask.hash.MD4.with.salt.s3cr3t", "a.b.c")]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("MD4") && text.contains("SHA-256"), "{text}");
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(
            text.contains("columns.column.mask.hash.MD4.with.salt.<not shown>"),
            "{text}"
        );
        let err = rules(&[("column.mask.with.x.chars", "a.b.c")]).unwrap_err();
        assert!(
            err.to_string().contains("columns.column.mask.with.x.chars"),
            "{err}"
        );
        let err = rules(&[("column.blacklist", "a.b.c")]).unwrap_err();
        assert!(
            err.to_string().contains("columns.column.blacklist"),
            "{err}"
        );
        let err = rules(&[("column.include.list", "a"), ("column.exclude.list", "b")]).unwrap_err();
        assert!(err.to_string().contains("column.include.list"), "{err}");
        let err = rules(&[("column.exclude.list", "a.b.(")]).unwrap_err();
        assert!(err.to_string().contains("invalid pattern"), "{err}");
        let hashing = rules(&[("column.mask.hash.v2.SHA-512.with.salt.s3cr3t", "a.b.c")]).unwrap();
        assert!(!format!("{hashing:?}").contains("s3cr3t"));
    }
}
