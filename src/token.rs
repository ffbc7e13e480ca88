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
/// Cloning is cheap (a reference count).
///
/// ```
/// use quorumlock::LockToken;
///
/// let a = LockToken::generate();
/// let b = LockToken::generate();
/// assert_ne!(a, b);
/// assert_eq!(a.as_str().len(), 32);
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LockToken(Arc<str>);

impl LockToken {
    /// The number of random bytes in a generated token.
    pub const RANDOM_BYTES: usize = 16;

    /// Draws a new token from the CSPRNG.
    pub fn generate() -> Self {
        let mut bytes = [0u8; Self::RANDOM_BYTES];
        rand::rng().fill_bytes(&mut bytes);
        let mut hex = String::with_capacity(Self::RANDOM_BYTES * 2);
        for byte in bytes {
            hex.push(char::from(HEX_DIGITS[usize::from(byte >> 4)]));
            hex.push(char::from(HEX_DIGITS[usize::from(byte & 0x0f)]));
        }
        LockToken(hex.into())
    }

    /// Wraps a token read elsewhere (from a log, or another client), for example so that an
    /// operator can release a lock whose holder died.
    pub fn from_string(token: impl Into<String>) -> Self {
        LockToken(token.into().into())
    }

    /// The token as stored in Redis.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

impl fmt::Display for LockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockToken({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

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
