//! How big a snapshot chunk is, for every source: at most `rows` rows and,
//! counting the bytes of the rows read, the row that reaches `bytes` ends it
//! (the next chunk starts after it). How many rows a chunk asks the server
//! for starts small and follows the rows' size ([`ChunkAsk`]), so that a
//! table of multi-megabyte rows is not sent whole only to be cut.

/// Rows the first chunk of a table asks for; later chunks follow the rows' size.
const FIRST_ASK: usize = 64;

/// Bytes counted for a value that is not a byte string or text (numbers,
/// dates, NULL).
pub(crate) const FIXED_VALUE_BYTES: u64 = 8;

/// How big a chunk may be.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChunkBounds {
    /// Most rows (`chunk_rows`, `incremental_chunk_rows`).
    pub rows: usize,
    /// Most bytes (`chunk_max_mb`): the row that reaches it ends the chunk.
    pub bytes: u64,
}

/// The rows the next chunk of one table asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChunkAsk {
    bounds: ChunkBounds,
    ask: usize,
}

impl ChunkAsk {
    /// The first chunk's ask, within `bounds`.
    pub(crate) fn new(bounds: ChunkBounds) -> Self {
        ChunkAsk {
            bounds,
            ask: bounds.rows.min(FIRST_ASK),
        }
    }

    /// Rows the next chunk asks for.
    pub(crate) fn rows(&self) -> usize {
        self.ask
    }

    /// Whether rows of `bytes` in all reach the byte bound (the chunk ends).
    pub(crate) fn full(&self, bytes: u64) -> bool {
        bytes >= self.bounds.bytes
    }

    /// Sizes the next chunk after one that read `read` rows of `bytes`
    /// (`cut`: it reached the byte bound).
    pub(crate) fn after(&mut self, read: usize, bytes: u64, cut: bool) {
        if read > 0 {
            self.ask = next_ask(self.ask, read, bytes, cut, self.bounds);
        }
    }
}

/// Rows the next chunk asks for, after one that asked for `ask` and read
/// `read` rows of `bytes` (`cut`: it reached the byte bound): as many as fit
/// at this chunk's bytes per row, and at most twice as many as it asked for.
fn next_ask(ask: usize, read: usize, bytes: u64, cut: bool, bounds: ChunkBounds) -> usize {
    let per_row = (bytes / read as u64).max(1);
    let fit = usize::try_from(bounds.bytes / per_row).unwrap_or(usize::MAX);
    let grown = if cut { read } else { ask.saturating_mul(2) };
    grown.min(fit).clamp(1, bounds.rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn chunks_ask_for_as_many_rows_as_fit() {
        let bounds = ChunkBounds {
            rows: 10_000,
            bytes: 8 * MIB,
        };
        // Small rows: the ask doubles up to `chunk_rows`.
        assert_eq!(next_ask(64, 64, 64 * 100, false, bounds), 128);
        assert_eq!(next_ask(8192, 8192, 8192 * 100, false, bounds), 10_000);
        // 2 MiB rows: cut at the fourth; four fit.
        assert_eq!(next_ask(64, 4, 8 * MIB, true, bounds), 4);
        // Rows larger than the bound: one at a time.
        assert_eq!(next_ask(4, 1, 20 * MIB, true, bounds), 1);
        // Rows that shrink: the ask grows again, to what fits.
        assert_eq!(next_ask(4, 4, 4 * MIB, false, bounds), 8);
        assert_eq!(next_ask(8, 8, 8 * 1024, false, bounds), 16);
        // A chunk that fits but whose rows are large: no more than fit.
        assert_eq!(next_ask(6, 6, 6 * 1280 * 1024, false, bounds), 6);
    }

    #[test]
    fn an_ask_starts_small_and_an_empty_chunk_keeps_it() {
        let mut ask = ChunkAsk::new(ChunkBounds {
            rows: 10,
            bytes: MIB,
        });
        assert_eq!(ask.rows(), 10);
        let mut ask_big = ChunkAsk::new(ChunkBounds {
            rows: 1000,
            bytes: MIB,
        });
        assert_eq!(ask_big.rows(), FIRST_ASK);
        ask_big.after(0, 0, false);
        assert_eq!(ask_big.rows(), FIRST_ASK);
        ask_big.after(2, MIB, true);
        assert_eq!(ask_big.rows(), 2);
        assert!(ask_big.full(MIB) && !ask_big.full(MIB - 1));
        ask.after(10, 10, false);
        assert_eq!(ask.rows(), 10);
    }
}
