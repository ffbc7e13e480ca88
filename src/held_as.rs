//! [`HeldAs`]: the mode a name is held in, named by a node that refused a request of
//! another mode (docs/safety.md, "One name, one lock").

use std::fmt;

/// The shared mode a name is held in on a node, when a request of another mode was
/// refused for it: one name is one lock (a mutex, a read-write lock, or a semaphore of one
/// K), so readers, permits of K and permits of another K never hold it together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeldAs {
    /// Readers of the read-write lock of the name.
    Readers,
    /// Permits of the semaphore of the name with this many permits.
    Permits(u32),
}

impl fmt::Display for HeldAs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeldAs::Readers => f.write_str("a read-write lock, by readers"),
            HeldAs::Permits(permits) => write!(f, "a semaphore of {permits} permits"),
        }
    }
}
