//! Generates Rust code (prost) for the Perfetto trace messages fctrace
//! writes, from the official `protos/perfetto_trace.proto` (see
//! protos/README.md).
//!
//! The file defines about a thousand messages; generating all of them
//! makes megabytes of code. So protoc (the protoc-bin-vendored crate's)
//! parses the file into descriptors, the messages of [`KEEP`] are kept
//! with their fields whose types are kept too (scalars, enums nested in a
//! kept message, kept messages), and prost generates code from that.
//! Field numbers and types are Perfetto's own; a dropped field is one
//! fctrace never writes.

use prost::Message;
use prost_types::{DescriptorProto, FileDescriptorSet};
use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Command;

/// The messages generated (full names).
const KEEP: &[&str] = &[
    "perfetto.protos.Trace",
    "perfetto.protos.TracePacket",
    "perfetto.protos.TracePacketDefaults",
    "perfetto.protos.TrackEventDefaults",
    "perfetto.protos.TrackEvent",
    "perfetto.protos.TrackDescriptor",
    "perfetto.protos.ProcessDescriptor",
    "perfetto.protos.ThreadDescriptor",
    "perfetto.protos.DebugAnnotation",
    "perfetto.protos.InternedData",
    "perfetto.protos.EventName",
    "perfetto.protos.EventCategory",
    "perfetto.protos.DebugAnnotationName",
];

const PROTO: &str = "protos/perfetto_trace.proto";

fn main() {
    println!("cargo:rerun-if-changed={PROTO}");
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let protoc = protoc_bin_vendored::protoc_bin_path().expect("protoc-bin-vendored has no protoc");
    let set_path = out.join("perfetto_trace.pb");
    let status = Command::new(&protoc)
        .arg("--include_imports")
        .arg(format!("--descriptor_set_out={}", set_path.display()))
        .arg("-Iprotos")
        .arg(PROTO)
        .status()
        .expect("cannot run protoc");
    assert!(status.success(), "protoc failed on {PROTO}");
    let bytes = std::fs::read(&set_path).expect("protoc wrote no descriptor set");
    let mut set = FileDescriptorSet::decode(&bytes[..]).expect("protoc's descriptor set");

    let keep: HashSet<String> = KEEP.iter().map(|s| format!(".{s}")).collect();
    for file in &mut set.file {
        let prefix = format!(".{}", file.package());
        let mut enums = HashSet::new();
        file.message_type = std::mem::take(&mut file.message_type)
            .into_iter()
            .filter_map(|m| prune(m, &prefix, &prefix, &keep, &mut enums))
            .collect();
        file.enum_type
            .retain(|e| enums.contains(&format!("{prefix}.{}", e.name())));
        file.extension.clear();
        file.service.clear();
        // Comments are located by paths into the unpruned file.
        file.source_code_info = None;
    }
    let found: usize = set.file.iter().map(|f| f.message_type.len()).sum();
    assert!(found > 0, "none of KEEP is in {PROTO}");

    prost_build::Config::new()
        .out_dir(&out)
        .compile_fds(set)
        .expect("prost-build failed");
}

/// Message `m` (whose scope is `scope`, in package `package`) if kept, with only the fields of
/// kept types and the nested messages kept; `enums` receives the full
/// names of the enums its fields use.
fn prune(
    mut m: DescriptorProto,
    scope: &str,
    package: &str,
    keep: &HashSet<String>,
    enums: &mut HashSet<String>,
) -> Option<DescriptorProto> {
    use prost_types::field_descriptor_proto::Type;
    let name = format!("{scope}.{}", m.name());
    if !keep.contains(&name) {
        return None;
    }
    m.field.retain(|f| match f.r#type() {
        Type::Message | Type::Group => keep.contains(f.type_name()),
        Type::Enum => {
            let t = f.type_name();
            match t.rsplit_once('.') {
                // Nested in a message: kept with that message.
                Some((parent, _)) if keep.contains(parent) => true,
                // At the top level of the package: kept when used.
                Some((parent, _)) if parent == package => {
                    enums.insert(t.to_string());
                    true
                }
                _ => false,
            }
        }
        _ => true,
    });
    // Oneofs that lost all their fields go; the others are renumbered.
    let used: Vec<i32> = (0..m.oneof_decl.len() as i32)
        .filter(|i| m.field.iter().any(|f| f.oneof_index == Some(*i)))
        .collect();
    m.oneof_decl = used
        .iter()
        .map(|&i| m.oneof_decl[i as usize].clone())
        .collect();
    for f in &mut m.field {
        if let Some(i) = f.oneof_index {
            f.oneof_index = used.iter().position(|&u| u == i).map(|p| p as i32);
        }
    }
    m.extension.clear();
    m.nested_type = std::mem::take(&mut m.nested_type)
        .into_iter()
        .filter_map(|n| prune(n, &name, package, keep, enums))
        .collect();
    Some(m)
}
