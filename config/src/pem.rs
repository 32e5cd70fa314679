//! Offline checks of the PEM files a TLS block names (CA, client certificate
//! and key), shared by every `tls` section so each fails at load naming its field.

use std::path::{Path, PathBuf};

use crate::ConfigError;

/// Checks that `path` is readable and holds a PEM block whose label contains
/// `kind` (`CERTIFICATE`, `PRIVATE KEY`).
pub fn check_pem(field: &str, path: &Path, kind: &str) -> Result<(), ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new(field, format!("cannot read {}: {e}", path.display())))?;
    let found = text
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.contains(kind));
    if found {
        Ok(())
    } else {
        Err(ConfigError::new(
            field,
            format!("{} holds no PEM {kind}", path.display()),
        ))
    }
}

/// Checks the `ca_file`, and the client `cert_file` and `key_file` (both or
/// neither) of the TLS block at `field`.
pub fn check_tls_files(
    field: &str,
    ca_file: Option<&PathBuf>,
    cert_file: Option<&PathBuf>,
    key_file: Option<&PathBuf>,
) -> Result<(), ConfigError> {
    if let Some(ca) = ca_file {
        check_pem(&format!("{field}.ca_file"), ca, "CERTIFICATE")?;
    }
    match (cert_file, key_file) {
        (Some(cert), Some(key)) => {
            check_pem(&format!("{field}.cert_file"), cert, "CERTIFICATE")?;
            check_pem(&format!("{field}.key_file"), key, "PRIVATE KEY")
        }
        (Some(_), None) => Err(ConfigError::new(
            format!("{field}.key_file"),
            "missing: cert_file needs its private key",
        )),
        (None, Some(_)) => Err(ConfigError::new(
            format!("{field}.cert_file"),
            "missing: key_file needs its certificate",
        )),
        (None, None) => Ok(()),
    }
}
