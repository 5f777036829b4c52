//! Tuning of glibc's malloc for this workload. Every layer of a forward or calibration pass
//! allocates work buffers of the same few sizes; by default glibc maps each buffer above
//! 128 KiB afresh and unmaps it on free, so every layer paid a page fault and a zeroed page
//! per 4 KiB (measured while pruning SmolLM2-135M: half of the main thread's time, and
//! 18 s of system time in an 81 s prune). With other allocators both calls do nothing. Buffers
//! above glibc's mmap threshold are still mapped afresh; [`HugePageAllocator`] backs them with
//! huge pages.

/// Keeps freed buffers of up to 32 MiB in the heap for the next allocation instead of handing
/// them back to the kernel. Call once at start-up, before other threads exist.
#[allow(unsafe_code)]
pub fn keep_freed_memory_for_reuse() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, HUGE_PAGE_ALLOCATION as libc::c_int);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// Hands the freed memory the heap keeps back to the kernel, so that after a phase with large
/// work buffers (calibration) the resident set is what is still in use.
#[allow(unsafe_code)]
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Asks the kernel to back `buffer` with transparent huge pages where it allows them on request
/// (`/sys/kernel/mm/transparent_hugepage/enabled` = `madvise`): a buffer about to be filled for
/// the first time then takes one page fault and one zeroing per 2 MiB instead of per 4 KiB
/// (loading a 1B checkpoint spent ~40 % of its time in those faults). Only the buffer's whole
/// 2 MiB pages are advised; elsewhere, and with other allocators, this does nothing.
#[allow(unsafe_code)]
pub fn prefer_huge_pages<T>(buffer: &mut [std::mem::MaybeUninit<T>]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = buffer.as_mut_ptr() as usize;
        let end = start + std::mem::size_of_val(buffer);
        let first = start.next_multiple_of(HUGE);
        let last = end / HUGE * HUGE;
        if last > first {
            // SAFETY: madvise(MADV_HUGEPAGE) only changes how the kernel backs pages of this
            // range, which lies inside `buffer`; their contents and mapping stay valid.
            unsafe {
                libc::madvise(
                    first as *mut libc::c_void,
                    last - first,
                    libc::MADV_HUGEPAGE,
                );
            }
        }
    }
}

/// Allocations at least this large (glibc's mmap threshold as
/// [`keep_freed_memory_for_reuse`] sets it) come from fresh anonymous maps, so their first
/// touch faults in every page; [`HugePageAllocator`] asks for huge pages for them.
pub const HUGE_PAGE_ALLOCATION: usize = 32 << 20;

/// The system allocator, asking the kernel for transparent huge pages ([`prefer_huge_pages`])
/// on every allocation of at least [`HUGE_PAGE_ALLOCATION`] bytes: a layer of a 7B model
/// passes through several such buffers (its weights read from the checkpoint or the layer
/// store, their host copies while pruning, the pruned tensors), each faulted in 4 KiB at a
/// time otherwise (70 M minor faults, a third of the CPU time of a streamed 7B run). The
/// `wanda` binary installs it as its global allocator.
pub struct HugePageAllocator;

impl HugePageAllocator {
    fn advise(ptr: *mut u8, size: usize) {
        if !ptr.is_null() && size >= HUGE_PAGE_ALLOCATION {
            // SAFETY: the allocator just returned `ptr` for `size` bytes, so the slice covers
            // memory this allocation owns; prefer_huge_pages only advises the kernel.
            #[allow(unsafe_code)]
            let buffer = unsafe {
                std::slice::from_raw_parts_mut(ptr.cast::<std::mem::MaybeUninit<u8>>(), size)
            };
            prefer_huge_pages(buffer);
        }
    }
}

// SAFETY: every call is forwarded to the system allocator with its own arguments; the advice
// changes how the kernel backs the pages, never their contents or the allocation's bounds.
#[allow(unsafe_code)]
unsafe impl std::alloc::GlobalAlloc for HugePageAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged (the caller upholds GlobalAlloc::alloc's contract).
        let ptr = unsafe { std::alloc::System.alloc(layout) };
        Self::advise(ptr, layout.size());
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let ptr = unsafe { std::alloc::System.alloc_zeroed(layout) };
        Self::advise(ptr, layout.size());
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from System, with `layout`.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as in `dealloc`; the caller upholds GlobalAlloc::realloc's contract.
        let ptr = unsafe { std::alloc::System.realloc(ptr, layout, new_size) };
        Self::advise(ptr, new_size);
        ptr
    }
}
