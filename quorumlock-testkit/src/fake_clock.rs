//! A node whose clock the test sets: redis-server under libfaketime (Debian's `faketime`
//! package), its offset and rate read from a file the test rewrites
//! ([`RedisProcess::set_clock`](crate::RedisProcess::set_clock)).
//!
//! Debian's redis-server links jemalloc, under which libfaketime cannot start (jemalloc
//! reads the time while libfaketime is still initialising). The node is therefore given a
//! stand-in `libjemalloc.so.2` that leaves allocation to glibc's malloc and answers the two
//! other jemalloc calls redis makes (`mallctl`, `nallocx`, and the statistics printer): it
//! is compiled once per process, with the C compiler on the machine.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Result, TestkitError};

/// Where Debian's package puts libfaketime.
const LIBFAKETIME: [&str; 2] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
];

/// The stand-in for jemalloc: allocation stays glibc's.
const SHIM: &str = r#"
#include <stddef.h>
#include <errno.h>
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen) {
    (void)name; (void)oldp; (void)oldlenp; (void)newp; (void)newlen;
    return ENOENT;
}
size_t nallocx(size_t size, int flags) { (void)flags; return size; }
void malloc_stats_print(void (*write_cb)(void *, const char *), void *opaque, const char *opts) {
    (void)opts;
    if (write_cb) write_cb(opaque, "glibc malloc stand-in: no jemalloc statistics\n");
}
"#;

/// The environment that starts a node under libfaketime, its clock read from `file`.
pub(crate) fn environment(file: &Path) -> Result<Vec<(OsString, OsString)>> {
    let library = LIBFAKETIME
        .iter()
        .map(Path::new)
        .find(|path| path.exists())
        .ok_or(TestkitError::ToolNotFound {
            tool: "libfaketime",
            package: "faketime",
        })?;
    let shim = shim_dir()?;
    Ok(vec![
        ("LD_PRELOAD".into(), library.into()),
        ("LD_LIBRARY_PATH".into(), shim.into()),
        ("FAKETIME_TIMESTAMP_FILE".into(), file.into()),
        // Read the file on every call, so that a change takes effect at once.
        ("FAKETIME_NO_CACHE".into(), "1".into()),
    ])
}

/// The directory of the compiled stand-in, made once per process.
fn shim_dir() -> Result<PathBuf> {
    static DIR: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| compile().map_err(|error| error.to_string()))
        .clone()
        .map_err(|reason| TestkitError::Io(std::io::Error::other(reason)))
}

fn compile() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("quorumlock-jemalloc-shim-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let source = dir.join("shim.c");
    std::fs::write(&source, SHIM)?;
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join("libjemalloc.so.2"))
        .arg(&source)
        .status()
        .map_err(|_| TestkitError::ToolNotFound {
            tool: "cc",
            package: "gcc",
        })?;
    if !status.success() {
        return Err(TestkitError::Io(std::io::Error::other(format!(
            "cc could not build the jemalloc stand-in: {status}"
        ))));
    }
    Ok(dir)
}
