//! Failed authentications throttled per source, in memory: each source (the
//! peer address of the connection; an IPv6 address by its /64) may fail a
//! small burst of times, then one more a while; past that it is answered 429
//! with `Retry-After` before its key is looked at, so a stranger guessing
//! keys or tenant ids reads nothing shared (no directory, no database).
//!
//! Only failures are counted: a source whose requests succeed has no state
//! here, so a client with the right key is never throttled by another
//! source's failures. Memory is bounded whatever the number of sources
//! ([`MAX_SOURCES`]): sources whose failures are forgotten go first, then the
//! least throttled. Behind a proxy every client has the proxy's address and
//! shares its budget (docs/api.md says so); a request whose peer is unknown
//! (the registrar Lambda: API Gateway throttles there) is not throttled.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use toki_model::quota::PerSecond;
use tokio::time::Instant;

use super::error::{ApiError, ErrorCode};
use super::quota::{retry_after_secs, Bucket};

/// Failed authentications a source may make at once after a quiet spell.
pub const FAILURE_BURST: u32 = 10;
/// Then one more failure this often (a token bucket's refill).
pub const FAILURE_RATE: PerSecond = PerSecond(1.0);
/// Sources remembered at most (about 100 bytes each).
pub const MAX_SOURCES: usize = 16_384;

/// Where a request came from, as far as the throttle cares: an IPv4
/// address, or an IPv6 address's /64 (one host usually has a whole /64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Source(IpAddr);

impl Source {
    pub(crate) fn of(peer: SocketAddr) -> Self {
        match peer.ip() {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source(IpAddr::V4(v4)),
                None => {
                    let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                    Source(IpAddr::V6(Ipv6Addr::from(prefix)))
                }
            },
            v4 => Source(v4),
        }
    }
}

/// A source throttled: 429 with how long to wait.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Throttled {
    pub(crate) wait: Duration,
}

impl IntoResponse for Throttled {
    fn into_response(self) -> Response {
        let secs = retry_after_secs(self.wait);
        let mut response = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::TooManyRequests,
            format!(
                "too many failed authentications from this address ({FAILURE_BURST} at once, \
                 then {} a second): retry in {secs} s",
                FAILURE_RATE.0
            ),
        )
        .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        response
    }
}

/// Every source's failures (see the module's documentation).
pub struct AuthThrottle {
    burst: u32,
    rate: PerSecond,
    capacity: usize,
    sources: Mutex<HashMap<Source, Bucket>>,
}

impl Default for AuthThrottle {
    fn default() -> Self {
        AuthThrottle::new(FAILURE_BURST, FAILURE_RATE, MAX_SOURCES)
    }
}

impl AuthThrottle {
    pub fn new(burst: u32, rate: PerSecond, capacity: usize) -> Self {
        AuthThrottle {
            burst,
            rate,
            capacity: capacity.max(1),
            sources: Mutex::default(),
        }
    }

    /// Sources remembered now.
    pub fn sources(&self) -> usize {
        self.sources.lock().expect("throttle lock").len()
    }

    /// Whether `source` may try to authenticate now (it has a failure left).
    pub(crate) fn check(&self, source: Source) -> Result<(), Throttled> {
        let mut sources = self.sources.lock().expect("throttle lock");
        match sources.get_mut(&source) {
            Some(bucket) => bucket
                .peek(Instant::now())
                .map_err(|wait| Throttled { wait }),
            None => Ok(()),
        }
    }

    /// Counts a failed authentication of `source`.
    pub(crate) fn failed(&self, source: Source) {
        let now = Instant::now();
        let mut sources = self.sources.lock().expect("throttle lock");
        if !sources.contains_key(&source) && sources.len() >= self.capacity {
            self.make_room(&mut sources, now);
        }
        let bucket = sources
            .entry(source)
            .or_insert_with(|| Bucket::new(self.rate, self.burst, now));
        // Already empty: the failure was refused before it cost anything.
        let _ = bucket.take(now);
    }

    /// Forgets the sources whose buckets have refilled (their failures are
    /// forgotten anyway); if none has, the one with the most failures left.
    fn make_room(&self, sources: &mut HashMap<Source, Bucket>, now: Instant) {
        sources.retain(|_, b| !b.is_full(now));
        if sources.len() < self.capacity {
            return;
        }
        let least = sources
            .iter_mut()
            .map(|(s, b)| (*s, b.tokens(now)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(s, _)| s);
        if let Some(s) = least {
            sources.remove(&s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(i: u32) -> SocketAddr {
        SocketAddr::from((std::net::Ipv4Addr::from(0x0a00_0000 + i), 40_000))
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_failures_then_one_a_second() {
        let throttle = AuthThrottle::default();
        let a = Source::of(peer(1));
        for _ in 0..FAILURE_BURST {
            assert_eq!(throttle.check(a), Ok(()));
            throttle.failed(a);
        }
        let wait = throttle.check(a).unwrap_err().wait;
        assert!(wait > Duration::ZERO && wait <= Duration::from_secs(1));
        assert_eq!(
            throttle.check(Source::of(peer(2))),
            Ok(()),
            "another source"
        );
        tokio::time::advance(wait).await;
        assert_eq!(throttle.check(a), Ok(()), "one more after the wait");
    }

    #[tokio::test(start_paused = true)]
    async fn memory_is_bounded_whatever_the_number_of_sources() {
        let throttle = AuthThrottle::new(2, PerSecond(1.0), 100);
        for i in 0..10_000 {
            throttle.failed(Source::of(peer(i)));
            assert!(throttle.sources() <= 100);
        }
        // The latest (throttled) sources are still known.
        let last = Source::of(peer(9_999));
        throttle.failed(last);
        assert!(throttle.check(last).is_err());
    }

    #[test]
    fn an_ipv6_host_is_its_64() {
        let a: SocketAddr = "[2001:db8:1:2:aaaa::1]:1".parse().unwrap();
        let b: SocketAddr = "[2001:db8:1:2:bbbb::9]:2".parse().unwrap();
        let c: SocketAddr = "[2001:db8:1:3::1]:1".parse().unwrap();
        assert_eq!(Source::of(a), Source::of(b));
        assert_ne!(Source::of(a), Source::of(c));
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:1".parse().unwrap();
        assert_eq!(Source::of(mapped), Source::of(peer(1)));
    }
}
