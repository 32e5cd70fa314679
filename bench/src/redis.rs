//! Just enough of the Redis protocol (RESP) to load keys and time GETs, without a client crate.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};

/// A blocking Redis connection.
pub(crate) struct Redis {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

impl Redis {
    pub(crate) fn connect(addr: SocketAddr) -> std::io::Result<Self> {
        let writer = TcpStream::connect(addr)?;
        writer.set_nodelay(true)?;
        Ok(Redis {
            reader: BufReader::new(writer.try_clone()?),
            writer,
        })
    }

    /// Sets every `(key, value)` pair, pipelined.
    pub(crate) fn set_all<'a>(
        &mut self,
        pairs: impl Iterator<Item = (String, &'a [u8])>,
    ) -> std::io::Result<()> {
        let mut pending = 0;
        let mut out = Vec::new();
        for (key, value) in pairs {
            command(&mut out, &[b"SET", key.as_bytes(), value]);
            pending += 1;
            if pending == 10_000 {
                self.flush_replies(&mut out, pending)?;
                pending = 0;
            }
        }
        self.flush_replies(&mut out, pending)
    }

    fn flush_replies(&mut self, out: &mut Vec<u8>, replies: usize) -> std::io::Result<()> {
        self.writer.write_all(out)?;
        out.clear();
        for _ in 0..replies {
            self.reply()?;
        }
        Ok(())
    }

    /// GET `key`: the value, if any.
    pub(crate) fn get(&mut self, key: &str) -> std::io::Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        command(&mut out, &[b"GET", key.as_bytes()]);
        self.writer.write_all(&out)?;
        self.reply()
    }

    fn reply(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        match line.as_bytes().first() {
            Some(b'+') => Ok(Some(line[1..].trim_end().as_bytes().to_vec())),
            Some(b'$') => {
                let len: i64 = line[1..]
                    .trim_end()
                    .parse()
                    .map_err(std::io::Error::other)?;
                if len < 0 {
                    return Ok(None);
                }
                let mut value = vec![0; len as usize + 2];
                self.reader.read_exact(&mut value)?;
                value.truncate(len as usize);
                Ok(Some(value))
            }
            _ => Err(std::io::Error::other(format!(
                "unexpected Redis reply {line:?}"
            ))),
        }
    }
}
