//! Compiles `tributary/v1/lookup.proto` with protox (a pure-Rust protobuf
//! compiler, so no system `protoc` is needed) and generates the tonic client and
//! server, plus the encoded descriptor set that server reflection serves.

use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "tributary/v1/lookup.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["."])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("lookup_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
