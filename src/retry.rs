//! Retries: the wait between two attempts of a blocking acquire, and the retry loop of
//! the primitives that do not queue on the nodes.

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::config::LockConfig;
use crate::error::LockError;

/// A wait drawn uniformly from `retry_delay ± retry_jitter`.
///
/// Randomness keeps competing clients from retrying in lockstep (the Redlock spec's
/// defence against split votes); configuration validation guarantees the jitter never
/// exceeds the delay, so the wait is never negative.
pub(crate) fn retry_wait(config: &LockConfig, rng: &mut impl Rng) -> Duration {
    let delay = config.retry_delay();
    let jitter = config.retry_jitter();
    if jitter.is_zero() {
        return delay;
    }
    let spread = jitter.saturating_mul(2);
    let offset = Duration::from_nanos(rng.random_range(0..=nanos(spread)));
    delay.saturating_sub(jitter).saturating_add(offset)
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The blocking acquire of the family's primitives that do not queue on the nodes (a
/// semaphore's passes over its slots, a read-write lock's sides): `attempt` up to
/// `1 + retry_count` times, `retry_delay ± retry_jitter` apart, until one succeeds or
/// fails for good; past `deadline`, [`LockError::TimedOut`] for `resource` when an
/// attempt was still running, or the last attempt's error when the next wait would end
/// past it.
///
/// Dropping the future drops the attempt in flight, which each attempt makes safe.
pub(crate) async fn retry_until<T, F, Fut>(
    config: &LockConfig,
    resource: &str,
    deadline: Option<Instant>,
    mut attempt: F,
) -> Result<T, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LockError>>,
{
    let started = Instant::now();
    let timed_out = |last: Option<LockError>| LockError::TimedOut {
        resource: resource.to_owned(),
        waited: started.elapsed(),
        last: last.map(Box::new),
    };
    let mut retries_left = config.retry_count();
    let mut last_error = None;
    loop {
        let result = match deadline {
            None => attempt().await,
            Some(deadline) => match tokio::time::timeout_at(deadline, attempt()).await {
                Ok(result) => result,
                Err(_) => return Err(timed_out(last_error.take())),
            },
        };
        let error = match result {
            Err(error) if error.is_retryable() && retries_left > 0 => error,
            result => return result,
        };
        let wait = retry_wait(config, &mut rand::rng());
        let wakes = Instant::now().checked_add(wait);
        if deadline.is_some_and(|deadline| wakes.is_none_or(|wakes| wakes >= deadline)) {
            return Err(error);
        }
        retries_left -= 1;
        last_error = Some(error);
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn waits_stay_within_the_jitter_and_spread_across_it() {
        let config = LockConfig::default();
        let mut rng = StdRng::seed_from_u64(7);
        let waits: Vec<_> = (0..10_000).map(|_| retry_wait(&config, &mut rng)).collect();
        let min = *waits.iter().min().unwrap();
        let max = *waits.iter().max().unwrap();
        assert!(min >= Duration::from_millis(100), "{min:?}");
        assert!(max <= Duration::from_millis(300), "{max:?}");
        // Uniform over 200 ms: 10,000 draws reach within 5 ms of both ends.
        assert!(min < Duration::from_millis(105), "{min:?}");
        assert!(max > Duration::from_millis(295), "{max:?}");
        let mean = waits.iter().sum::<Duration>() / 10_000;
        assert!(mean.abs_diff(Duration::from_millis(200)) < Duration::from_millis(5));
    }

    #[test]
    fn no_jitter_means_the_exact_delay() {
        let config = LockConfig::builder()
            .retry_jitter(Duration::ZERO)
            .build()
            .unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(retry_wait(&config, &mut rng), Duration::from_millis(200));
    }
}
