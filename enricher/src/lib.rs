//! Tributary enricher: stream–table join jobs declared in config files.
//!
//! Not built yet: see the issue "Enricher: stream–table join jobs".
