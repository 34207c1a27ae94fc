//! The agent's side of the shared memory: mapping it, taking and handing
//! back buffers, registering tasks. Layout and protocol: `fctrace_format::shm`.

use fctrace_format::shm::*;
use std::sync::atomic::{AtomicPtr, Ordering};

pub struct Shm {
    base: *mut u8,
    pub layout: Layout,
}

// SAFETY: the mapping is shared memory used only through atomics and
// per-thread-owned buffers.
unsafe impl Sync for Shm {}
unsafe impl Send for Shm {}

static SHM: AtomicPtr<Shm> = AtomicPtr::new(std::ptr::null_mut());

pub fn get() -> Option<&'static Shm> {
    let p = SHM.load(Ordering::Acquire);
    // SAFETY: set once to a leaked Box, never freed.
    unsafe { p.as_ref() }
}

impl Shm {
    /// Opens and maps the recorder's memory file.
    pub fn open(path: &str) -> Result<&'static Shm, String> {
        let cpath = std::ffi::CString::new(path).map_err(|_| "bad shm path".to_string())?;
        // SAFETY: plain libc calls with a valid C string; the fd is closed below.
        let fd = unsafe { libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(format!(
                "cannot open {path}: {}",
                std::io::Error::last_os_error()
            ));
        }
        let mut hdr = [0u8; 32];
        // SAFETY: reading into a local buffer of the given size.
        let n = unsafe { libc::pread(fd, hdr.as_mut_ptr().cast(), hdr.len(), 0) };
        if n != hdr.len() as isize || u64::from_le_bytes(hdr[0..8].try_into().unwrap()) != MAGIC {
            // SAFETY: closing our own fd.
            unsafe { libc::close(fd) };
            return Err("shared memory is not fctrace's".into());
        }
        let word = |o: usize| u32::from_le_bytes(hdr[o..o + 4].try_into().unwrap());
        if word(8) != VERSION {
            // SAFETY: closing our own fd.
            unsafe { libc::close(fd) };
            return Err("agent and recorder versions differ".into());
        }
        let layout = Layout {
            buf_count: word(12),
            buf_size: word(16),
            task_slots: word(20),
        };
        // SAFETY: maps the whole file shared; checked for failure below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.total_size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        // SAFETY: closing our own fd; the mapping stays.
        unsafe { libc::close(fd) };
        if base == libc::MAP_FAILED {
            return Err(format!(
                "cannot map shared memory: {}",
                std::io::Error::last_os_error()
            ));
        }
        let shm = Box::leak(Box::new(Shm {
            base: base.cast(),
            layout,
        }));
        SHM.store(shm, Ordering::Release);
        Ok(shm)
    }

    pub fn header(&self) -> &ShmHeader {
        // SAFETY: the header is at offset 0 of a mapping at least HEADER_SIZE long.
        unsafe { &*(self.base as *const ShmHeader) }
    }

    fn cells(&self, off: usize) -> &[QueueCell] {
        // SAFETY: the queue arrays lie within the mapping (Layout).
        unsafe {
            std::slice::from_raw_parts(
                self.base.add(off) as *const QueueCell,
                self.layout.buf_count as usize,
            )
        }
    }

    fn free_queue(&self) -> FreeStack<'_> {
        FreeStack {
            cells: self.cells(self.layout.free_queue_offset()),
            head: &self.header().free_head,
        }
    }

    fn full_queue(&self) -> Queue<'_> {
        let h = self.header();
        Queue {
            cells: self.cells(self.layout.full_queue_offset()),
            head: &h.full_head,
            tail: &h.full_tail,
        }
    }

    pub fn buffer(&self, index: u32) -> *mut BufHeader {
        // SAFETY: index < buf_count, so the buffer lies within the mapping.
        unsafe { self.base.add(self.layout.buffer_offset(index)) as *mut BufHeader }
    }

    pub fn task(&self, slot: u32) -> &TaskSlot {
        // SAFETY: slot < task_slots (checked by the caller's allocation).
        unsafe {
            &*(self
                .base
                .add(self.layout.tasks_offset() + slot as usize * 64)
                as *const TaskSlot)
        }
    }

    /// Takes a free buffer for a task, waiting for the recorder if none is
    /// free. None if the recorder is gone.
    pub fn acquire(&self, tid: u32, pid: u32, session: u32, slot: u32, seq: u32) -> Option<u32> {
        let mut spins = 0u32;
        loop {
            if let Some(i) = self.free_queue().pop() {
                let i = i as u32;
                self.header()
                    .buffers_used
                    .fetch_max(i + 1, Ordering::AcqRel);
                let b = self.buffer(i);
                // SAFETY: the buffer was free: nobody else touches it now.
                unsafe {
                    (*b).tid = tid;
                    (*b).pid = pid;
                    (*b).session = session;
                    (*b).seq = seq;
                    (*b).task_slot = slot;
                    (*b).pos.store(BUF_HEADER_SIZE as u64, Ordering::Relaxed);
                    (*b).state.store(BUF_OWNED, Ordering::Release);
                }
                return Some(i);
            }
            if self.header().recorder_gone.load(Ordering::Acquire) != 0 {
                return None;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                // The recorder is behind: wait for it rather than lose
                // events. The system call itself: libc's nanosleep is a
                // cancellation point (a pending pthread_cancel must not act
                // inside the agent) and is traced with -l.
                let ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 50_000,
                };
                // SAFETY: nanosleep with a valid timespec and no remainder;
                // the kernel clobbers rcx and r11 only.
                unsafe {
                    std::arch::asm!(
                        "syscall",
                        inlateout("rax") libc::SYS_nanosleep => _,
                        in("rdi") &ts as *const libc::timespec,
                        in("rsi") 0usize,
                        lateout("rcx") _,
                        lateout("r11") _,
                        options(nostack),
                    );
                }
            }
        }
    }

    /// Hands a buffer over to the recorder.
    pub fn release(&self, index: u32) {
        let b = self.buffer(index);
        // SAFETY: this thread owns the buffer until it is pushed.
        unsafe { (*b).state.store(BUF_FULL, Ordering::Release) };
        // The queue has one cell per buffer, so it cannot be full.
        while !self.full_queue().push(index as u64) {
            std::hint::spin_loop();
        }
        self.header().full_pushes.fetch_add(1, Ordering::Release);
    }

    pub fn add_lost(&self, n: u64) {
        self.header().lost_events.fetch_add(n, Ordering::Relaxed);
    }

    /// Names the creator of a task registered before it was known.
    pub fn set_parent(&self, slot: u32, parent_slot: u32) {
        if slot >= self.layout.task_slots {
            return;
        }
        let t = self.task(slot) as *const TaskSlot as *mut TaskSlot;
        // SAFETY: the slot belongs to the calling thread's task; the
        // recorder reads the table only after every task has ended.
        unsafe { (*t).parent_slot = parent_slot };
    }

    /// Claims a task slot and fills it in.
    pub fn register_task(
        &self,
        tid: u32,
        pid: u32,
        ppid: u32,
        session: u32,
        parent_slot: u32,
        origin: u32,
    ) -> Option<u32> {
        let slot = self.header().next_task.fetch_add(1, Ordering::Relaxed);
        if slot >= self.layout.task_slots {
            return None;
        }
        let t = self.task(slot) as *const TaskSlot as *mut TaskSlot;
        let mut comm = [0u8; 16];
        // SAFETY: PR_GET_NAME writes at most 16 bytes.
        unsafe { libc::prctl(libc::PR_GET_NAME, comm.as_mut_ptr()) };
        // SAFETY: the slot was just claimed by this thread alone.
        unsafe {
            (*t).tid = tid;
            (*t).pid = pid;
            (*t).ppid = ppid;
            (*t).session = session;
            (*t).parent_slot = parent_slot;
            (*t).origin = origin;
            (*t).comm = comm;
            (*t).state.store(TASK_LIVE, Ordering::Release);
        }
        Some(slot)
    }
}

pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc has no memory effects.
    unsafe { std::arch::x86_64::_rdtsc() }
}
