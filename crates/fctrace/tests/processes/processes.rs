//! processes.c: a thread, fork, vfork + execl, posix_spawn, system() and a
//! final execlp (after a failing execl). Every task is traced: the output
//! and exit status are those of the program alone, the task table says
//! which task made which, and each task's calls form the tree its source
//! says.

use fctrace_testkit::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The tasks of a trace, from info.json, with the program of each.
#[derive(Debug)]
struct TaskRow {
    id: u64,
    origin: String,
    parent: Option<u64>,
    pid: u64,
    tid: u64,
    program: String,
}

fn tasks_of(dir: &Path) -> Vec<TaskRow> {
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("info.json")).unwrap()).unwrap();
    let mut programs: BTreeMap<u64, String> = BTreeMap::new();
    for e in std::fs::read_dir(dir.join("sessions")).unwrap() {
        let path = e.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut sid = None;
        let mut exe = None;
        for line in text.lines().take(10) {
            let mut f = line.split('\t');
            match (f.next(), f.next()) {
                (Some("session"), Some(v)) => sid = v.parse().ok(),
                (Some("exe"), Some(v)) => exe = Some(v.to_string()),
                _ => {}
            }
        }
        programs.insert(sid.unwrap(), exe.unwrap());
    }
    info["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| TaskRow {
            id: t["id"].as_u64().unwrap(),
            origin: t["origin"].as_str().unwrap().to_string(),
            parent: t["parent"].as_u64(),
            pid: t["pid"].as_u64().unwrap(),
            tid: t["tid"].as_u64().unwrap(),
            program: programs[&t["session"].as_u64().unwrap()].clone(),
        })
        .collect()
}

/// The calls of each task (`# task N:` header), without signal markers
/// (the shell's SIGCHLD): the outermost calls of its threads.
fn replay_by_task(dir: &Path) -> BTreeMap<u64, Vec<Node>> {
    let (_, replay) = replay_calls(dir);
    let mut tasks: BTreeMap<u64, Vec<Node>> = BTreeMap::new();
    for t in replay.threads {
        let id = t.task.expect("replay names the task of every thread");
        tasks.entry(id).or_default().extend(t.roots);
    }
    tasks
}

/// The subtree of the one outermost `main()` (or the outermost calls).
fn main_of(roots: &[Node]) -> Vec<Node> {
    let mains: Vec<Node> = roots
        .iter()
        .filter(|n| n.label == "main()")
        .cloned()
        .collect();
    if mains.is_empty() {
        roots.to_vec()
    } else {
        mains
    }
}

const CHILD_TREE: &str = "
    main()
      child_main()
        work()
          leaf()
          printf()
          fflush()
        getenv()
        printf()
";

fn run_cmd(exe: &Path, wrap: Option<(&Path, &[&str])>, preload: Option<&Path>) -> Run {
    let mut cmd = match wrap {
        Some((dir, opts)) => {
            let mut c = Command::new(fctrace_bin());
            c.arg("record").arg("-d").arg(dir).args(opts).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    match preload {
        Some(p) => cmd.env("LD_PRELOAD", p),
        None => cmd.env_remove("LD_PRELOAD"),
    };
    run(&mut cmd)
}

fn libm() -> PathBuf {
    let out = Command::new("gcc")
        .arg("-print-file-name=libm.so.6")
        .output()
        .unwrap();
    let p = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    std::fs::canonicalize(&p).unwrap_or(p)
}

#[test]
fn every_task_is_traced_and_the_program_is_unchanged() {
    let exe = c_program("processes.c", "O0", &["-O0", "-pthread"]);
    let libm = libm();
    let variants: [(Option<&Path>, &[&str]); 3] =
        [(None, &[]), (Some(&libm), &[]), (None, &["-l"])];
    for (preload, opts) in variants {
        let native = run_cmd(&exe, None, preload);
        assert_eq!(native.code(), Some(3), "{}", native.describe());
        assert!(
            native.stdout.contains("execd: LD_PRELOAD="),
            "{}",
            native.describe()
        );
        let dir = TraceDir::new("processes");
        let traced = run_cmd(&exe, Some((&dir.path, opts)), preload);
        assert_same_behaviour(
            &native,
            &traced,
            &format!("{preload:?} {opts:?} (trace {})", dir.path.display()),
        );
        if preload.is_some() {
            continue;
        }

        // The task table: who made whom.
        let tasks = tasks_of(&dir.path);
        let exe_s = canonical(&exe).to_string_lossy().into_owned();
        let by_id: BTreeMap<u64, &TaskRow> = tasks.iter().map(|t| (t.id, t)).collect();
        let start: Vec<&TaskRow> = tasks.iter().filter(|t| t.origin == "start").collect();
        assert_eq!(start.len(), 1, "{tasks:#?}");
        let start = start[0];
        assert_eq!(start.parent, None);
        assert_eq!(start.program, exe_s);
        let children = |origin: &str| -> Vec<&TaskRow> {
            tasks
                .iter()
                .filter(|t| t.origin == origin && t.parent == Some(start.id))
                .collect()
        };
        let threads = children("thread");
        assert_eq!(threads.len(), 1, "{tasks:#?}");
        assert_eq!(threads[0].pid, start.pid);
        let forks = children("fork");
        assert_eq!(forks.len(), 1, "{tasks:#?}");
        assert_ne!(forks[0].pid, start.pid);
        let execs = children("exec");
        assert_eq!(execs.len(), 1, "{tasks:#?}");
        assert_eq!((execs[0].pid, execs[0].tid), (start.pid, start.tid));
        assert_eq!(execs[0].program, exe_s);
        // vfork + execl, posix_spawn, and the shells of system() and popen().
        let spawns = children("spawn");
        assert_eq!(spawns.len(), 4, "{tasks:#?}");
        assert_eq!(spawns[0].program, exe_s);
        assert_eq!(spawns[1].program, exe_s);
        let mut under_sh = Vec::new();
        for sh in &spawns[2..] {
            assert_eq!(
                canonical(Path::new(&sh.program)),
                canonical(Path::new("/bin/sh")),
                "{tasks:#?}"
            );
            // The shell runs the command (exec'd in place or after a fork).
            let runs: Vec<&TaskRow> = tasks
                .iter()
                .filter(|t| {
                    let mut p = t.parent;
                    while let Some(id) = p {
                        if id == sh.id {
                            return true;
                        }
                        p = by_id[&id].parent;
                    }
                    false
                })
                .filter(|t| t.program == exe_s)
                .collect();
            assert_eq!(runs.len(), 1, "{tasks:#?}");
            under_sh.push(runs[0]);
        }
        for t in &tasks {
            if let Some(p) = t.parent {
                assert!(
                    by_id.contains_key(&p),
                    "task {} has unknown parent {p}",
                    t.id
                );
            }
        }

        if !opts.is_empty() {
            continue;
        }
        // Each task's calls.
        let trees = replay_by_task(&dir.path);
        let tree = |id: u64| outline(&main_of(trees.get(&id).map_or(&[], Vec::as_slice)));
        assert_outline_eq(
            &tree(start.id),
            &expected_outline(
                "
                main() (open)
                  work()
                    leaf()
                    printf()
                    fflush()
                  pthread_create()
                  pthread_join()
                  do_fork()
                    fork()
                    status_of()
                      waitpid()
                    printf()
                  do_vfork()
                    vfork()
                    status_of()
                      waitpid()
                    printf()
                  do_spawn()
                    posix_spawn()
                    status_of()
                      waitpid()
                    printf()
                  do_system()
                    snprintf()
                    system()
                    printf()
                  do_popen()
                    snprintf()
                    popen()
                    fgets()
                    fgets()
                    fgets()
                    pclose()
                    printf()
                  fflush()
                  execl()
                  perror()
                  execlp() (open)
                ",
            ),
            &format!("started task (trace {})", dir.path.display()),
        );
        assert_outline_eq(
            &tree(threads[0].id),
            &expected_outline(
                "
                thread_main()
                  work()
                    leaf()
                    printf()
                    fflush()
                ",
            ),
            "thread",
        );
        // The child runs on inside main > do_fork, where its parent
        // forked: it returns from fork(), then works and _exits.
        assert_outline_eq(
            &tree(forks[0].id),
            &expected_outline(
                "
                main() (open)
                  do_fork() (open)
                    fork()
                    work()
                      leaf()
                      printf()
                      fflush()
                    _exit() (open)
                ",
            ),
            "fork child",
        );
        let child = expected_outline(CHILD_TREE);
        for t in [spawns[0], spawns[1], under_sh[0], under_sh[1], execs[0]] {
            assert_outline_eq(
                &tree(t.id),
                &child,
                &format!("task {} ({})", t.id, t.origin),
            );
        }
    }
}
