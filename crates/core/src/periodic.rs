//! A pass run at a fixed period until shutdown: the scanner's minute and the
//! repair pass's, in `toki serve`.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

/// Runs `pass` every `period`, the first at once, until `shutdown` changes.
/// A pass that overruns its period delays the next one rather than making
/// passes bunch up to catch up.
pub async fn run_every<F, Fut>(period: Duration, mut shutdown: watch::Receiver<bool>, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => break,
        }
        pass().await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn passes_run_at_the_period_and_stop_at_shutdown() {
        let (stop, shutdown) = watch::channel(false);
        let passes = Arc::new(AtomicU32::new(0));
        let counted = passes.clone();
        let run = tokio::spawn(run_every(Duration::from_secs(60), shutdown, move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }));
        // At once, then at 60 s and 120 s: three passes in 150 s.
        tokio::time::sleep(Duration::from_secs(150)).await;
        assert_eq!(passes.load(Ordering::SeqCst), 3);
        stop.send(true).unwrap();
        run.await.unwrap();
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(passes.load(Ordering::SeqCst), 3, "none after shutdown");
    }
}
