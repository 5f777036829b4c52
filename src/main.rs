//! The `wanda` command line: parse, run, map errors to exit codes (0 ok, 1 a gate or threshold
//! said no, 2 error).

// The command line prints its results; the library (denied `print_stdout`) never does.
#![allow(clippy::print_stdout)]

mod cli;

use std::process::ExitCode;

use clap::Parser;

#[global_allocator]
static ALLOCATOR: wanda::sys::allocator::HugePageAllocator =
    wanda::sys::allocator::HugePageAllocator;

fn main() -> ExitCode {
    wanda::sys::allocator::keep_freed_memory_for_reuse();
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(err) => {
            // A pipeline's problems print as `wanda validate` prints them, each its own
            // `error: …` line with its place and help.
            let top = err.chain().next();
            if let Some(invalid) =
                top.and_then(|e| e.downcast_ref::<wanda::pipeline::ValidationError>())
            {
                eprintln!("{invalid}");
                return ExitCode::from(2);
            }
            eprintln!("error: {err}");
            for cause in err.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(2)
        }
    }
}
