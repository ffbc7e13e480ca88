//! [`LockToken`]: the random value that proves ownership of a lock.

use std::fmt;
use std::sync::Arc;

use rand::RngCore;

/// The unique value stored under a lock's key; only its holder can release or refresh it.
///
/// Each acquisition draws 128 bits from a cryptographically secure generator (rand's
/// `ThreadRng`, a ChaCha generator seeded and regularly reseeded from the OS), written as
/// 32 lowercase hex digits. 128 bits is what the Redlock safety analysis asks for; a v4
/// UUID carries only 122 random bits, so it is not used here.
///
/// Cloning is cheap: a generated token is 32 bytes kept inline, one read elsewhere a
/// reference-counted string.
///
/// ```
/// use quorumlock::LockToken;
///
/// let a = LockToken::generate();
/// let b = LockToken::generate();
/// assert_ne!(a, b);
/// assert_eq!(a.as_str().len(), 32);
/// ```
#[derive(Clone)]
pub struct LockToken(Repr);

/// A generated token is kept inline: every held lock and every request carries one, and
/// its 32 digits cost no more inline than a reference-counted string's allocation would.
#[derive(Clone)]
enum Repr {
    /// [`LockToken::generate`]'s hex digits (ASCII).
    Generated([u8; LockToken::RANDOM_BYTES * 2]),
    /// A token read elsewhere, of any length.
    Given(Arc<str>),
}

impl LockToken {
    /// The number of random bytes in a generated token.
    pub const RANDOM_BYTES: usize = 16;

    /// Draws a new token from the CSPRNG.
    pub fn generate() -> Self {
        let mut bytes = [0u8; Self::RANDOM_BYTES];
        rand::rng().fill_bytes(&mut bytes);
        let mut hex = [0u8; Self::RANDOM_BYTES * 2];
        for (digits, byte) in hex.chunks_exact_mut(2).zip(bytes) {
            digits[0] = HEX_DIGITS[usize::from(byte >> 4)];
            digits[1] = HEX_DIGITS[usize::from(byte & 0x0f)];
        }
        LockToken(Repr::Generated(hex))
    }

    /// Wraps a token read elsewhere (from a log, or another client), for example so that an
    /// operator can release a lock whose holder died.
    pub fn from_string(token: impl Into<String>) -> Self {
        LockToken(Repr::Given(token.into().into()))
    }

    /// The token as stored in Redis.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Generated(hex) => std::str::from_utf8(hex).expect("hex digits are ASCII"),
            Repr::Given(token) => token,
        }
    }

    /// The token's bytes, as sent to the nodes: [`as_str`](Self::as_str) without the UTF-8
    /// check that a generated token's inline digits need to be read as text.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Generated(hex) => hex,
            Repr::Given(token) => token.as_bytes(),
        }
    }
}

// By the text alone: a generated token equals the same digits read back with `from_string`.
impl PartialEq for LockToken {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for LockToken {}

impl std::hash::Hash for LockToken {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

impl fmt::Display for LockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for LockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockToken({})", self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    #[test]
    fn tokens_are_32_hex_digits() {
        let token = LockToken::generate();
        assert_eq!(token.as_str().len(), 32);
        assert!(token
            .as_str()
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    }

    #[test]
    fn a_token_read_back_equals_the_generated_one() {
        let token = LockToken::generate();
        let read = LockToken::from_string(token.to_string());
        assert_eq!(token, read);
        let state = std::hash::RandomState::new();
        assert_eq!(state.hash_one(&token), state.hash_one(&read));
        assert_ne!(token, LockToken::generate());
    }

    #[test]
    fn tokens_do_not_repeat() {
        let tokens: HashSet<_> = (0..10_000).map(|_| LockToken::generate()).collect();
        assert_eq!(tokens.len(), 10_000);
    }

    #[test]
    fn every_bit_position_varies() {
        // A generator stuck on some bits (e.g. UUID version bits) would leave a digit constant.
        let tokens: Vec<_> = (0..256).map(|_| LockToken::generate()).collect();
        for position in 0..32 {
            let digits: HashSet<_> = tokens
                .iter()
                .map(|t| t.as_str().as_bytes()[position])
                .collect();
            assert!(
                digits.len() > 4,
                "digit {position} barely varies: {digits:?}"
            );
        }
    }
}
