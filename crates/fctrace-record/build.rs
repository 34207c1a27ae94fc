//! Builds the agent (crates/fctrace-agent) as a release cdylib for the
//! recorder to embed (`record.rs`), so that the fctrace binary is all a
//! user installs. Set FCTRACE_AGENT_STUB=1 to embed an empty agent (for
//! working on the CLI alone; tracing then fails with a clear error).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn watch(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                watch(&p);
            } else {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
}

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let dest = out.join("fctrace_agent.so");
    println!("cargo:rerun-if-env-changed=FCTRACE_AGENT_STUB");
    if env::var_os("FCTRACE_AGENT_STUB").is_some() {
        std::fs::write(&dest, b"").unwrap();
        return;
    }
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let crates = manifest.parent().unwrap();
    let root = crates.parent().unwrap();
    for c in [
        "fctrace-agent",
        "fctrace-format",
        "fctrace-options",
        "fctrace-symbols",
    ] {
        watch(&crates.join(c).join("src"));
        println!(
            "cargo:rerun-if-changed={}",
            crates.join(c).join("Cargo.toml").display()
        );
    }
    let target_dir = out.join("agent-target");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "fctrace-agent",
            "--manifest-path",
        ])
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .args([
            "--config",
            "profile.release.debug=false",
            "--config",
            "profile.release.strip=\"debuginfo\"",
        ])
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .status()
        .expect("cannot run cargo to build the agent");
    if !status.success() {
        panic!("building the fctrace agent failed");
    }
    std::fs::copy(
        target_dir.join("release").join("libfctrace_agent.so"),
        &dest,
    )
    .expect("agent library missing");
}
