//! threads.c: 100 threads, thread i calls work() i + 1 times, each work()
//! calls leaf() twice. 101 tasks; exact totals; every thread's calls nest
//! properly in replay (the parser checks depth and closing names per tid),
//! each worker thread's tree is exactly thread_main() { work() { leaf();
//! leaf(); } x k } with the k's being 1..=100; counts equal callgrind's.

use fctrace_testkit::*;
use std::path::PathBuf;

const N: u64 = 100;

fn threads(opt: &str) -> PathBuf {
    c_program("threads.c", opt, &[opt, "-pthread"])
}

const STDOUT: &str = "threads: 100 joined, total=210968949030\n";

fn check(opt: &str) {
    let exe = threads(opt);
    let rec = record(&exe, &[], &[]);
    assert_eq!(rec.run.stdout, STDOUT, "{}", rec.run.describe());
    let ctx = format!("threads.c {opt} (trace {})", rec.dir.path.display());

    let rep = report(&rec.dir.path);
    assert_eq!(rep.lost_events, 0, "{ctx}");
    assert_eq!(
        rep.tasks.len() as u64,
        N + 1,
        "{ctx}: tasks {:?}",
        rep.tasks
    );
    let pid = rep.tasks[0].pid;
    let mut tids: Vec<u64> = rep.tasks.iter().map(|t| t.tid).collect();
    tids.sort();
    tids.dedup();
    assert_eq!(tids.len() as u64, N + 1, "{ctx}: duplicate tids");
    assert!(
        rep.tasks.iter().all(|t| t.pid == pid),
        "{ctx}: all tasks are threads of one process"
    );
    assert!(
        rep.tasks.iter().any(|t| t.tid == pid),
        "{ctx}: the main thread (tid == pid) is a task"
    );
    for (name, n) in [
        ("main", 1),
        ("thread_main", N),
        ("work", N * (N + 1) / 2),
        ("leaf", N * (N + 1)),
        ("pthread_create", N),
        ("pthread_join", N),
    ] {
        assert_eq!(rep.calls(name), n, "{ctx}: calls of {name}");
    }

    let replay = replay(&rec.dir.path);
    assert_eq!(
        replay.threads.len() as u64,
        N + 1,
        "{ctx}: threads in replay"
    );
    let main_thread = replay.main_thread().expect("main thread");
    assert_eq!(
        main_thread.tid, pid,
        "{ctx}: main() runs in the thread whose tid is the pid"
    );
    let mut expected = String::from("main()\n");
    expected.push_str(&"  pthread_create()\n".repeat(N as usize));
    expected.push_str(&"  pthread_join()\n".repeat(N as usize));
    expected.push_str("  printf()\n");
    assert_outline_eq(
        &outline(std::slice::from_ref(replay.main())),
        &expected,
        &ctx,
    );

    let mut ks = Vec::new();
    for t in replay.threads.iter().filter(|t| t.tid != pid) {
        assert!(
            rep.tasks.iter().any(|task| task.tid == t.tid),
            "{ctx}: tid {} of replay is not a task",
            t.tid
        );
        assert_eq!(
            t.roots.len(),
            1,
            "{ctx}: tid {}: {}",
            t.tid,
            outline(&t.roots)
        );
        let k = t.roots[0].children.len();
        let mut want = String::from("thread_main()\n");
        want.push_str(&"  work()\n    leaf()\n    leaf()\n".repeat(k));
        assert_outline_eq(&outline(&t.roots), &want, &format!("{ctx}, tid {}", t.tid));
        ks.push(k);
    }
    ks.sort();
    assert_eq!(
        ks,
        (1..=N as usize).collect::<Vec<_>>(),
        "{ctx}: thread i calls work() i + 1 times"
    );
}

#[test]
fn threads_o0() {
    check("-O0");
}

#[test]
fn threads_o2() {
    check("-O2");
}

#[test]
fn threads_counts_match_callgrind() {
    for opt in ["-O0", "-O2"] {
        assert_counts_match_callgrind(&threads(opt), &[], &CompareOptions::default());
    }
}
