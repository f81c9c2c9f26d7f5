//! The test MCP server (`src/bin/troupe-test-mcp-server.rs`): where its binary is, built on
//! first use.
//!
//! A binary of this crate is not built for the tests of other packages (Cargo only builds the
//! binaries of the package under test), so [`mcp_server_binary`] builds it once per test
//! process with the Cargo that builds the tests, into the same target directory and profile
//! (`cargo build -p troupe-test-support --bin troupe-test-mcp-server`; a no-op when it is up
//! to date), and returns its path.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The binary's name.
pub const MCP_SERVER_BIN: &str = "troupe-test-mcp-server";

/// The path of the test MCP server binary, built (once per process) if needed.
///
/// # Panics
/// When the target directory cannot be found from the running test's path or the build
/// fails (the panic shows Cargo's output).
pub fn mcp_server_binary() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BUILT.get_or_init(build) {
        Ok(path) => path.clone(),
        Err(why) => panic!("building the test MCP server failed: {why}"),
    }
}

fn build() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    // Tests run from <target>/<profile dir>/deps/<test>-<hash>.
    let mut profile_dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if profile_dir.file_name().is_some_and(|name| name == "deps") {
        profile_dir.pop();
    }
    let target_dir = profile_dir
        .parent()
        .ok_or_else(|| format!("no target directory above {}", profile_dir.display()))?;
    let profile = match profile_dir.file_name().and_then(|name| name.to_str()) {
        Some("debug") | None => "dev".to_owned(),
        Some(other) => other.to_owned(),
    };
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml");
    let output = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--locked", "--manifest-path", manifest])
        .arg("--target-dir")
        .arg(target_dir)
        .args([
            "--profile",
            &profile,
            "-p",
            "troupe-test-support",
            "--bin",
            MCP_SERVER_BIN,
        ])
        .output()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo build exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let binary = profile_dir.join(MCP_SERVER_BIN);
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(format!("{} is missing after the build", binary.display()))
    }
}
