//! A TCP proxy that can be cut: while down it closes every open connection
//! and resets new ones at once, as a database whose host went away would
//! look to its clients. Listens on 127.0.0.1.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Clone)]
pub struct Proxy {
    down: Arc<AtomicBool>,
    /// Bumped on every cut: open connections end when it changes.
    cuts: watch::Sender<u64>,
    pub addr: std::net::SocketAddr,
}

impl Proxy {
    /// Forwards 127.0.0.1:<any port> to `target` (`host:port`).
    pub async fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Proxy {
            down: Arc::default(),
            cuts: watch::Sender::new(0),
            addr: listener.local_addr().unwrap(),
        };
        let me = proxy.clone();
        let target = target.to_owned();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                if me.down.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let mut cut = me.cuts.subscribe();
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&target).await else {
                        return;
                    };
                    let (mut client, mut server) = (client, server);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        proxy
    }

    /// Cuts every connection and refuses new ones until `up`.
    pub fn down(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    pub fn up(&self) {
        self.down.store(false, Ordering::SeqCst);
    }

    /// `host:port` to connect to instead of the target.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }
}
