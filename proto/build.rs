//! Compiles `tributary/v1/lookup.proto` with protox (a pure-Rust protobuf
//! compiler, so no system `protoc` is needed) and generates, from it:
//! - the messages and the tonic client (`OUT_DIR/tributary.v1.rs`);
//! - the tonic server over the response messages that carry rows, with each
//!   row a `ServedValue` (`OUT_DIR/served/tributary.v1.rs`, see `grpc::served`),
//!   and requests decoded by `grpc::served_codec`;
//! - the encoded descriptor set that server reflection serves.

use prost::Message as _;

/// The messages the server's side generates anew: those that hold rows.
const SERVED: [&str; 3] = ["GetResponse", "BatchGetResponse", "ScanRow"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "tributary/v1/lookup.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["."])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("lookup_descriptor.bin"), fds.encode_to_vec())?;
    let mut served = tonic_prost_build::configure()
        .build_client(false)
        .out_dir(out.join("served"))
        .codec_path("crate::grpc::served_codec::ServedCodec")
        .extern_path(".tributary.v1.Value", "crate::grpc::served::ServedValue");
    for file in &fds.file {
        let package = file.package();
        let names = file.message_type.iter().map(|m| m.name());
        for name in names.chain(file.enum_type.iter().map(|e| e.name())) {
            if name != "Value" && !SERVED.contains(&name) {
                served = served.extern_path(
                    format!(".{package}.{name}"),
                    format!("crate::grpc::v1::{name}"),
                );
            }
        }
    }
    std::fs::create_dir_all(out.join("served"))?;
    served.compile_fds(fds.clone())?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
