//! How a table's events are shaped from its schema, the same for streamed
//! and snapshot rows: the key columns (`message_key_columns`), the value
//! columns and their masks (`columns:`), how values are written (`values:`,
//! `source.undecodable_text`) and the Connect schemas (`converter:`).

use std::sync::Arc;

use crate::column_rules::ColumnRules;
use crate::config::CaptureConfig;
use crate::connect_schema;
use crate::error::CaptureError;
use crate::message_key::MessageKeyColumns;
use crate::schema::{InfoColumn, SchemaError, TableSchema};
use crate::value_modes::DecodeOptions;

/// Everything the configuration says about the shape of events.
#[derive(Debug, Clone)]
pub struct EventShape {
    /// `server_name`: `source.name` and the prefix of schema names.
    pub server_name: Arc<str>,
    /// Key columns chosen by configuration.
    pub keys: MessageKeyColumns,
    /// Value columns, masks, hashes, truncations.
    pub columns: ColumnRules,
    /// How values are decoded and written.
    pub decode: DecodeOptions,
}

impl EventShape {
    /// The shape a capture config asks for.
    pub fn of(config: &CaptureConfig) -> Result<Self, CaptureError> {
        Ok(EventShape {
            server_name: config.server_name.as_str().into(),
            keys: config.message_key_columns.clone(),
            columns: ColumnRules::parse(&config.columns)?,
            decode: config.decode_options(),
        })
    }

    /// Shaping a table needs its `information_schema` columns (declared lengths).
    pub fn needs_info(&self) -> bool {
        self.columns.needs_lengths()
    }

    /// `schema` shaped: keyed, its value columns chosen and mapped, its
    /// Connect schemas attached; `info` as [`Self::needs_info`] asks.
    pub fn table(
        &self,
        schema: TableSchema,
        info: Option<&[InfoColumn]>,
    ) -> Result<TableSchema, SchemaError> {
        let schema = self.columns.attach(schema.keyed_by(&self.keys)?, info);
        Ok(connect_schema::attach(
            schema,
            &self.server_name,
            &self.decode,
        ))
    }
}
