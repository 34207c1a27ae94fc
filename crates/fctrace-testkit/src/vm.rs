//! Running programs inside a Linux VM: qemu-system-x86_64 under TCG (no
//! KVM) boots a kernel with an initramfs the test builds, whose `/init`
//! runs the test's script and powers off.
//!
//! * [`Initramfs`]: busybox (`/bin`, every applet linked), programs with
//!   the shared libraries `ldd` lists for them, the test's script; packed
//!   with `cpio -H newc`.
//! * [`kernel`]: this machine's `/boot/vmlinuz-$(uname -r)` when readable,
//!   else Debian's (the package `linux-image-amd64` depends on, or a named
//!   one: [`debian_kernel`]), fetched with `apt-get download` and unpacked
//!   once into a cache under `target/`. No modules: the initramfs needs no
//!   disk, and the serial console, devtmpfs, proc, sysfs and tmpfs are
//!   built into Debian's kernels.
//! * [`boot`]: the kernel's console goes to the first serial port (kept,
//!   printed when something fails), the script's stdout and stderr to the
//!   second, so kernel messages never mix with the results; a time limit.

use crate::paths::{target_tmpdir, unique_suffix, FileLock, Fnv};
use crate::process::{clip, require_tool, run_with_timeout, tool, Run};
use crate::record::TraceDir;
use crate::scratch::scratch;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a boot may take, start to power-off.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(150);

/// The path of `name` on `PATH`, or a failed test saying what to install.
#[track_caller]
pub fn require(name: &str, package: &str) -> PathBuf {
    require_tool(name, package)
}

/// An initramfs being put together in a scratch directory.
pub struct Initramfs {
    dir: TraceDir,
    root: PathBuf,
}

impl Initramfs {
    /// An initramfs holding busybox and the directories `/init` mounts on.
    pub fn new(label: &str) -> Initramfs {
        let dir = scratch(&format!("initramfs-{label}"));
        let root = dir.path.join("root");
        for d in ["bin", "dev", "proc", "sys", "tmp"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        let fs = Initramfs { dir, root };
        let busybox = require("busybox", "busybox-static");
        fs.add_program("/bin/busybox", &busybox);
        fs
    }

    /// Where `dest` (an absolute path in the image) lies on this machine.
    fn host_path(&self, dest: &str) -> PathBuf {
        let p = self.root.join(dest.trim_start_matches('/'));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        p
    }

    /// Copies `src` to `dest`, with its mode.
    pub fn add_file(&self, dest: &str, src: &Path) {
        let to = self.host_path(dest);
        fs::copy(src, &to).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
    }

    /// Writes `text` to `dest`, executable or not.
    pub fn add_text(&self, dest: &str, text: &str, executable: bool) {
        let to = self.host_path(dest);
        fs::write(&to, text).unwrap();
        let mode = if executable { 0o755 } else { 0o644 };
        fs::set_permissions(&to, fs::Permissions::from_mode(mode)).unwrap();
    }

    /// Copies the executable `src` to `dest` without its debug information
    /// (a smaller image boots faster), and the shared libraries `ldd` lists
    /// for it to their own paths.
    pub fn add_program(&self, dest: &str, src: &Path) {
        require("objcopy", "binutils");
        let to = self.host_path(dest);
        tool(
            "objcopy",
            &[OsStr::new("--strip-debug"), src.as_os_str(), to.as_os_str()],
        );
        for lib in libraries(src) {
            let dest = lib.to_str().unwrap().to_string();
            if !self.host_path(&dest).exists() {
                self.add_file(&dest, &lib);
            }
        }
    }

    /// Sets `/init`: mounts proc, sysfs, devtmpfs and a tmpfs on `/tmp`,
    /// runs `script` (a busybox shell script, every applet on `PATH`) with
    /// its stdin empty and its output through a pipe (not a terminal: no
    /// pager) to the second serial port, says its exit status and powers
    /// off.
    pub fn set_script(&self, script: &str) {
        self.add_text("/test.sh", script, true);
        let init = "#!/bin/busybox sh\n\
            # /init of an initramfs built by fctrace's tests (crates/fctrace-testkit/src/vm.rs).\n\
            /bin/busybox --install -s /bin\n\
            export PATH=/bin\n\
            mount -t proc proc /proc\n\
            mount -t sysfs sysfs /sys\n\
            mount -t devtmpfs devtmpfs /dev\n\
            mount -t tmpfs tmpfs /tmp\n\
            exec >/dev/ttyS1 2>&1\n\
            echo @@vm-start\n\
            { sh /test.sh; echo \"@@vm-done $?\"; } 2>&1 </dev/null | cat\n\
            poweroff -f\n";
        self.add_text("/init", init, true);
    }

    /// Packs the image (`cpio -o -H newc`, uncompressed) and returns its path.
    pub fn build(&self) -> PathBuf {
        require("cpio", "cpio");
        let out = self.dir.path.join("initramfs.cpio");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("find . | LC_ALL=C sort | cpio -o -H newc --quiet > \"$1\"")
            .arg("sh")
            .arg(&out)
            .current_dir(&self.root);
        run_with_timeout(&mut cmd, Duration::from_secs(120)).expect_success();
        out
    }
}

/// The shared libraries (and the dynamic loader) `ldd` lists for `exe`:
/// none for a static one.
fn libraries(exe: &Path) -> Vec<PathBuf> {
    let r = run_with_timeout(Command::new("ldd").arg(exe), Duration::from_secs(60));
    if !r.success() {
        assert!(
            r.stdout.contains("not a dynamic executable")
                || r.stderr.contains("not a dynamic executable"),
            "ldd {} failed\n{}",
            exe.display(),
            r.describe()
        );
        return Vec::new();
    }
    let mut libs = Vec::new();
    for line in r.stdout.lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
        // "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no path.
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        match path {
            Some(p) if p.starts_with('/') => libs.push(PathBuf::from(p)),
            Some("not") => panic!("ldd {}: {line}", exe.display()),
            _ => {}
        }
    }
    libs
}

/// A kernel to boot: this machine's when `/boot` has it readable, else
/// Debian's current one ([`debian_kernel`]).
pub fn kernel() -> PathBuf {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let own = PathBuf::from(format!("/boot/vmlinuz-{}", release.trim()));
    if fs::File::open(&own).is_ok() {
        return own;
    }
    debian_kernel(&debian_kernel_package())
}

/// The kernel package Debian's `linux-image-amd64` depends on here
/// (`linux-image-6.1.0-NN-amd64` on bookworm).
pub fn debian_kernel_package() -> String {
    debian_kernel_package_of("linux-image-amd64")
}

/// The kernel package Debian's meta-package `meta` depends on
/// (`linux-image-6.12-amd64` → `linux-image-6.12.NN+deb12-amd64`).
pub fn debian_kernel_package_of(meta: &str) -> String {
    require("apt-cache", "apt");
    let r = run_with_timeout(
        Command::new("apt-cache").args(["depends", meta]),
        Duration::from_secs(60),
    );
    r.stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(str::trim)
        .find(|p| p.starts_with("linux-image-"))
        .map(str::to_string)
        .unwrap_or_else(|| {
            panic!(
                "apt-cache knows no {meta} (run apt-get update)\n{}",
                r.describe()
            )
        })
}

/// The kernel image of Debian's package `package`, downloaded with
/// `apt-get download` and unpacked (`dpkg-deb -x`) under
/// `target/vm-kernels/PACKAGE` the first time.
pub fn debian_kernel(package: &str) -> PathBuf {
    let cache = kernel_cache();
    let dir = cache.join(package);
    if let Some(k) = vmlinuz_in(&dir) {
        return k;
    }
    let _lock = FileLock::acquire(&format!("kernel-{package}"));
    if let Some(k) = vmlinuz_in(&dir) {
        return k;
    }
    require("apt-get", "apt");
    require("dpkg-deb", "dpkg");
    let work = cache.join(format!(".{package}.tmp-{}", unique_suffix()));
    fs::create_dir_all(&work).unwrap();
    let fetch = run_with_timeout(
        Command::new("apt-get")
            .args(["download", "-q", package])
            .current_dir(&work),
        Duration::from_secs(600),
    );
    assert!(
        fetch.success(),
        "apt-get download {package} failed (apt-get update?)\n{}",
        fetch.describe()
    );
    let deb = fs::read_dir(&work)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension() == Some(OsStr::new("deb")))
        .expect("apt-get download left no .deb");
    let tree = work.join("tree");
    tool(
        "dpkg-deb",
        &[OsStr::new("-x"), deb.as_os_str(), tree.as_os_str()],
    );
    fs::rename(&tree, &dir).unwrap_or_else(|e| panic!("rename to {}: {e}", dir.display()));
    let _ = fs::remove_dir_all(&work);
    vmlinuz_in(&dir).unwrap_or_else(|| panic!("{package} has no /boot/vmlinuz-*"))
}

fn vmlinuz_in(dir: &Path) -> Option<PathBuf> {
    fs::read_dir(dir.join("boot"))
        .ok()?
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("vmlinuz-")
        })
}

/// The cache of kernels under `target/`.
fn kernel_cache() -> PathBuf {
    target_tmpdir().parent().unwrap().join("vm-kernels")
}

/// The uncompressed kernel (`vmlinux`, an ELF file) inside the bzImage
/// `kernel`, which qemu starts at its PVH entry: no decompression under
/// TCG, about 12 s less per boot here. Extracted once into
/// `target/vm-kernels/vmlinux-HASH`; `kernel` itself when it holds no
/// such image.
fn pvh_image(kernel: &Path) -> PathBuf {
    let data = fs::read(kernel).unwrap_or_else(|e| panic!("{}: {e}", kernel.display()));
    let out = kernel_cache().join(format!("vmlinux-{}", Fnv::new().bytes(&data).hex()));
    if out.exists() {
        return out;
    }
    let _lock = FileLock::acquire("vmlinux");
    if out.exists() {
        return out;
    }
    fs::create_dir_all(kernel_cache()).unwrap();
    // The payload's first bytes, and what decompresses it (extra bytes
    // after it are the bzImage's own).
    let formats: [(&[u8], &str); 3] = [
        (b"\xfd7zXZ\0", "xz -dc --single-stream"),
        (b"\x28\xb5\x2f\xfd", "zstd -dcq"),
        (b"\x1f\x8b\x08", "gzip -dcq"),
    ];
    let tmp = kernel_cache().join(format!(".vmlinux.tmp-{}", unique_suffix()));
    for (magic, decompress) in formats {
        let Some(at) = data.windows(magic.len()).position(|w| w == magic) else {
            continue;
        };
        fs::write(&tmp, &data[at..]).unwrap();
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("{decompress} <\"$1\" >\"$1.elf\""))
            .arg("sh")
            .arg(&tmp);
        // Its status says nothing: gzip and zstd complain of the bytes
        // after the payload. The result must be a whole ELF file.
        run_with_timeout(&mut cmd, Duration::from_secs(300));
        let elf = PathBuf::from(format!("{}.elf", tmp.display()));
        if whole_elf_with_pvh_entry(&elf) {
            fs::rename(&elf, &out).unwrap();
            let _ = fs::remove_file(&tmp);
            return out;
        }
        let _ = fs::remove_file(&elf);
    }
    let _ = fs::remove_file(&tmp);
    kernel.to_path_buf()
}

/// `path` is an ELF file as long as its section headers say, with a Xen
/// note of type 18 (`XEN_ELFNOTE_PHYS32_ENTRY`: the PVH entry point).
fn whole_elf_with_pvh_entry(path: &Path) -> bool {
    let Ok(d) = fs::read(path) else { return false };
    if d.len() < 64 || &d[..4] != b"\x7fELF" {
        return false;
    }
    let u = |at: usize, n: usize| {
        d[at..at + n]
            .iter()
            .rev()
            .fold(0u64, |v, &b| v << 8 | b as u64)
    };
    let end = u(0x28, 8) + u(0x3c, 2) * u(0x3a, 2);
    if (d.len() as u64) < end {
        return false;
    }
    let r = run_with_timeout(
        Command::new("readelf").arg("-n").arg(path),
        Duration::from_secs(60),
    );
    r.stdout.lines().any(|l| {
        l.trim_start().starts_with("Xen")
            && (l.contains("(0x00000012)") || l.contains("PHYS32_ENTRY"))
    })
}

/// A finished boot.
pub struct VmRun {
    /// The kernel's console (first serial port).
    pub console: String,
    /// What the script wrote (second serial port), `\r` removed, without
    /// the harness's own markers.
    pub output: String,
    /// The script's exit status.
    pub status: i32,
    /// From qemu's start to its end.
    pub took: Duration,
}

impl VmRun {
    /// Everything about the boot, for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "--- console ---\n{}\n--- script output (status {}) ---\n{}",
            clip(&self.console, 8000),
            self.status,
            clip(&self.output, 8000)
        )
    }
}

/// Boots `kernel` with `initrd` on the CPU model `cpu` (`qemu64`, `max`,
/// ...) under TCG, 1 GiB of memory, one CPU; waits for the power-off (at
/// most [`BOOT_TIMEOUT`]). Fails the test, with the console, if qemu fails
/// or the script did not run to its end.
#[track_caller]
pub fn boot(kernel: &Path, initrd: &Path, cpu: &str) -> VmRun {
    boot_within(kernel, initrd, cpu, BOOT_TIMEOUT)
}

/// [`boot`] with a time limit of the test's own (scripts that do more).
#[track_caller]
pub fn boot_within(kernel: &Path, initrd: &Path, cpu: &str, timeout: Duration) -> VmRun {
    let qemu = require("qemu-system-x86_64", "qemu-system-x86");
    let dir = scratch(&format!("vm-{cpu}"));
    let console = dir.path.join("console.txt");
    let serial = dir.path.join("serial1.txt");
    let mut cmd = Command::new(qemu);
    cmd.args(["-accel", "tcg", "-cpu", cpu, "-m", "1024", "-smp", "1"])
        .args(["-nodefaults", "-no-reboot", "-display", "none"])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-serial")
        .arg(format!("file:{}", serial.display()))
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", "console=ttyS0 panic=-1 quiet"])
        .stdin(Stdio::null());
    cmd.arg("-kernel").arg(pvh_image(kernel));
    let start = Instant::now();
    let run = run_with_timeout_or(&mut cmd, timeout, &[&console, &serial]);
    let took = start.elapsed();
    let read =
        |p: &Path| String::from_utf8_lossy(&fs::read(p).unwrap_or_default()).replace('\r', "");
    let (console, raw) = (read(&console), read(&serial));
    let ran = raw
        .split_once("@@vm-start\n")
        .and_then(|(_, rest)| rest.rsplit_once("@@vm-done "))
        .and_then(|(out, st)| Some((out.to_string(), st.trim().parse::<i32>().ok()?)));
    let Some((output, status)) = ran else {
        panic!(
            "the VM (-cpu {cpu}) did not run its script to the end\n{}\n--- console ---\n{}\n--- serial 1 ---\n{}",
            run.describe(),
            clip(&console, 8000),
            clip(&raw, 8000)
        );
    };
    eprintln!(
        "vm: -cpu {cpu} booted, ran and powered off in {:.1} s",
        took.as_secs_f64()
    );
    VmRun {
        console,
        output,
        status,
        took,
    }
}

/// [`run_with_timeout`], printing the serial ports' files when it times out.
fn run_with_timeout_or(cmd: &mut Command, timeout: Duration, files: &[&Path]) -> Run {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_with_timeout(cmd, timeout)
    }));
    r.unwrap_or_else(|e| {
        for f in files {
            let text = String::from_utf8_lossy(&fs::read(f).unwrap_or_default()).replace('\r', "");
            eprintln!("--- {} ---\n{}", f.display(), clip(&text, 8000));
        }
        std::panic::resume_unwind(e)
    })
}
