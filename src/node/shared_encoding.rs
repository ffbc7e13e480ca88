//! [`SharedEncoding`]: room for one request's wire form, shared by the nodes it goes to.

use std::any::Any;
use std::fmt;
use std::sync::OnceLock;

/// Room for a request's encoding (the command bytes a backend makes of it), shared by
/// every node the same request is sent to.
///
/// A session's keep-alive sends each chunk of its locks to every node, and the command is
/// the same for each of them: the first node to send it encodes it and keeps it here, and
/// the others send what it kept instead of encoding it again (at 10,000 locks on five
/// nodes, encoding each chunk once per node was a quarter of the session's CPU). A
/// backend keeps what it likes, of a type of its own; a node of another backend finds an
/// encoding of another type, and encodes its own.
///
/// ```
/// use quorumlock::node::SharedEncoding;
///
/// let shared = SharedEncoding::new();
/// assert!(!shared.is_encoded());
/// let mut encoded = 0;
/// for _node in 0..5 {
///     let bytes = shared.get_or_encode(|| {
///         encoded += 1;
///         b"*1\r\n$4\r\nPING\r\n".to_vec()
///     });
///     assert_eq!(bytes.map(Vec::as_slice), Some(&b"*1\r\n$4\r\nPING\r\n"[..]));
/// }
/// assert_eq!(encoded, 1);
/// assert!(shared.is_encoded());
/// // Another backend's type: not this one's to read.
/// assert!(shared.get_or_encode(|| 7u32).is_none());
/// ```
#[derive(Default)]
pub struct SharedEncoding {
    kept: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl SharedEncoding {
    /// Room for an encoding, empty.
    pub fn new() -> Self {
        SharedEncoding::default()
    }

    /// Whether an encoding is kept here: a node that finds one sends it, instead of
    /// encoding the request again.
    pub fn is_encoded(&self) -> bool {
        self.kept.get().is_some()
    }

    /// The encoding kept here, made by `encode` when none is kept yet; `None` when an
    /// encoding of another type is kept (another backend's), which `encode` is then not
    /// asked to replace.
    pub fn get_or_encode<T: Any + Send + Sync>(&self, encode: impl FnOnce() -> T) -> Option<&T> {
        self.kept
            .get_or_init(|| Box::new(encode()))
            .downcast_ref::<T>()
    }
}

impl fmt::Debug for SharedEncoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedEncoding")
            .field("encoded", &self.is_encoded())
            .finish()
    }
}
