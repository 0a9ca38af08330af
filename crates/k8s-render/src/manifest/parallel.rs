//! Parsing a stream's documents on every core, handing the results back in stream order.
//!
//! The stream is split at its `---` / `...` lines first (cheap, one pass); worker threads then take
//! batches of chunks, parse each chunk and run the caller's `work` on its documents, and the calling
//! thread consumes the batches strictly in order, at most [`WINDOW`] batches behind the workers (so
//! memory stays bounded by a few batches, not the stream). A worker does not know how many documents
//! came before its chunk, so it numbers a chunk's documents from 0; the consumer gets the number to add
//! (`base`) and can parse the chunk again itself, numbered right, where the order matters to it.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Condvar, Mutex, PoisonError};

use super::stream::{Chunk, Splitter, chunk_documents};
use super::{Document, ManifestError};

/// Chunks per batch a worker takes.
const BATCH: usize = 32;
/// How many batches the workers may be ahead of the consumer.
const WINDOW: usize = 16;

/// One chunk of the stream, as the consumer sees it.
pub(crate) struct ChunkRef<'c> {
    source: &'c str,
    chunk: &'c Chunk<'c>,
}

impl ChunkRef<'_> {
    /// Parses the chunk again on the calling thread, its first document numbered `first`: what the
    /// sequential reader ([`super::documents`]) gives for it, errors included.
    pub(crate) fn parse(&self, first: usize) -> Result<Vec<Document>, ManifestError> {
        chunk_documents(self.source, self.chunk, first)
    }
}

/// What the consumer wants next.
pub(crate) enum Flow {
    /// The next chunk.
    Next,
    /// Nothing more of this stream (after a parse error the reader ends, as [`super::documents`] does).
    Stop,
}

/// What one worker made of one chunk: `work`'s result for each of its documents (numbered from 0), or
/// `None` when the chunk does not parse.
type Outcome<R> = Option<Vec<R>>;

/// Parses `text` (named `source`) on up to `threads` threads, runs `work` on each document where it was
/// parsed, and calls `consume` for each chunk in stream order with the index its first document has in
/// the stream, the chunk, and `work`'s results, or the chunk's parse error (numbered right).
pub(crate) fn in_order<R, W, C>(source: &str, text: &str, threads: usize, work: W, mut consume: C)
where
    R: Send,
    W: Fn(Document) -> R + Sync,
    C: FnMut(usize, ChunkRef<'_>, Result<Vec<R>, ManifestError>) -> Flow,
{
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let chunks: Vec<Chunk<'_>> = Splitter::new(text).collect();
    let run = |chunk: &Chunk<'_>| -> Outcome<R> {
        chunk_documents(source, chunk, 0)
            .ok()
            .map(|docs| docs.into_iter().map(&work).collect())
    };
    let mut base = 0usize;
    let mut step = |base: &mut usize, chunk: &Chunk<'_>, outcome: Outcome<R>| -> Flow {
        // A chunk that does not parse: parsed again here for the error, numbered right.
        let outcome = match outcome {
            Some(results) => Ok(results),
            None => chunk_documents(source, chunk, *base).map(|docs| {
                docs.into_iter()
                    .map(|mut d| {
                        d.index = d.index.saturating_sub(*base);
                        work(d)
                    })
                    .collect()
            }),
        };
        let n = outcome.as_ref().map_or(0, Vec::len);
        let flow = consume(*base, ChunkRef { source, chunk }, outcome);
        *base += n;
        flow
    };
    let batches = chunks.len().div_ceil(BATCH);
    if threads <= 1 || batches <= 1 {
        for chunk in &chunks {
            if let Flow::Stop = step(&mut base, chunk, run(chunk)) {
                return;
            }
        }
        return;
    }

    struct Gate {
        /// Next batch to take.
        next: usize,
        /// Batches the consumer is done with.
        consumed: usize,
        stop: bool,
    }
    let gate = Mutex::new(Gate {
        next: 0,
        consumed: 0,
        stop: false,
    });
    let moved = Condvar::new();
    let lock = || gate.lock().unwrap_or_else(PoisonError::into_inner);
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel::<(usize, Vec<Outcome<R>>)>();
        for _ in 0..threads.min(batches) {
            let tx = tx.clone();
            let (chunks, run, gate, moved) = (&chunks, &run, &gate, &moved);
            scope.spawn(move || {
                loop {
                    let k = {
                        let mut g = gate.lock().unwrap_or_else(PoisonError::into_inner);
                        while !g.stop && g.next < batches && g.next >= g.consumed + WINDOW {
                            g = moved.wait(g).unwrap_or_else(PoisonError::into_inner);
                        }
                        if g.stop || g.next >= batches {
                            return;
                        }
                        g.next += 1;
                        g.next - 1
                    };
                    let lo = k * BATCH;
                    let hi = (lo + BATCH).min(chunks.len());
                    let out: Vec<Outcome<R>> = chunks
                        .get(lo..hi)
                        .unwrap_or_default()
                        .iter()
                        .map(run)
                        .collect();
                    if tx.send((k, out)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let mut pending: BTreeMap<usize, Vec<Outcome<R>>> = BTreeMap::new();
        let mut want = 0usize;
        'batches: while want < batches {
            let Some(outcomes) = pending.remove(&want) else {
                match rx.recv() {
                    Ok((k, out)) => {
                        pending.insert(k, out);
                        continue;
                    }
                    // Every worker is gone (only when stopped): nothing more will come.
                    Err(_) => break,
                }
            };
            let lo = want * BATCH;
            for (chunk, outcome) in chunks.iter().skip(lo).zip(outcomes) {
                if let Flow::Stop = step(&mut base, chunk, outcome) {
                    break 'batches;
                }
            }
            want += 1;
            lock().consumed = want;
            moved.notify_all();
        }
        lock().stop = true;
        moved.notify_all();
        drop(rx);
    });
}

/// How many threads to parse on: the machine's cores (at most 8).
pub(crate) fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}
