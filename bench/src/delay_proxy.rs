//! A TCP proxy that delays every chunk by a fixed time in each direction: a
//! pod-to-pod round trip on a machine whose kernel has no `netem` qdisc.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// Starts a proxy on a free loopback port forwarding to `upstream`, adding
/// `one_way` before each forwarded chunk (so `2 × one_way` per round trip).
pub(crate) fn start(upstream: SocketAddr, one_way: Duration) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(upstream) else {
                continue;
            };
            for (from, to) in [(&client, &server), (&server, &client)] {
                let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else {
                    continue;
                };
                std::thread::spawn(move || pump(from, to, one_way));
            }
        }
    });
    Ok(addr)
}

fn pump(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    from.set_nodelay(true).ok();
    to.set_nodelay(true).ok();
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        std::thread::sleep(delay);
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    to.shutdown(Shutdown::Write).ok();
}
