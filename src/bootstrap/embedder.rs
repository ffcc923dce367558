//! The embedding case: the embedder (an MPI or OpenSHMEM library) lends its own
//! fixed-length allgather, as `MPI_Allgather` or UCC's OOB allgather do.
//!
//! Owns: turning variable-length contributions into fixed-length rounds.
//! Must not: call the embedder's collective a different number of times on
//! different ranks (every decision below depends only on data all ranks
//! hold after the first round).
//!
//! A round of [`Bootstrap::allgather`] is one or two rounds of the embedder's: first every
//! rank's length (8 bytes, little-endian), then, unless every contribution is
//! empty, every contribution padded with zeros to the longest.

#![forbid(unsafe_code)]

use super::{Bootstrap, BootstrapError, MAX_CONTRIBUTION};
use crate::protocol::Rank;

/// A [`Bootstrap`] over the embedder's fixed-length allgather `f(mine, all)`:
/// `mine` has the same length `L` on every rank, `all` has `L × size` bytes
/// and receives rank r's bytes at `r × L`. An `Err` text is the embedder's
/// reason (it becomes [`BootstrapError::Embedder`]).
pub struct EmbedderAllgather<F> {
    rank: Rank,
    size: u32,
    allgather: F,
}

impl<F> EmbedderAllgather<F>
where
    F: FnMut(&[u8], &mut [u8]) -> Result<(), String>,
{
    pub fn new(rank: Rank, size: u32, allgather: F) -> Result<Self, BootstrapError> {
        if rank >= size {
            return Err(BootstrapError::Invalid(format!(
                "rank {rank} is not below the job size {size}"
            )));
        }
        Ok(EmbedderAllgather {
            rank,
            size,
            allgather,
        })
    }

    fn round(&mut self, mine: &[u8]) -> Result<Vec<u8>, BootstrapError> {
        let total = mine
            .len()
            .checked_mul(self.size as usize)
            .ok_or(BootstrapError::TooLarge {
                rank: self.rank,
                len: mine.len() as u64,
            })?;
        let mut all = vec![0; total];
        (self.allgather)(mine, &mut all).map_err(BootstrapError::Embedder)?;
        let at = self.rank as usize * mine.len();
        if all[at..at + mine.len()] != *mine {
            return Err(BootstrapError::EmbedderInconsistent(format!(
                "this rank's {} bytes are not at its position (rank {} × {} bytes)",
                mine.len(),
                self.rank,
                mine.len()
            )));
        }
        Ok(all)
    }
}

impl<F> Bootstrap for EmbedderAllgather<F>
where
    F: FnMut(&[u8], &mut [u8]) -> Result<(), String>,
{
    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        // A too-long contribution still takes part in the length round, so
        // that every rank learns of it and fails the same way.
        let lens = self.round(&(mine.len() as u64).to_le_bytes())?;
        let lens: Vec<u64> = lens
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        for (rank, &len) in (0..).zip(&lens) {
            if len > MAX_CONTRIBUTION as u64 {
                return Err(BootstrapError::TooLarge { rank, len });
            }
        }
        let longest = lens.iter().copied().max().unwrap_or(0) as usize;
        if longest == 0 {
            return Ok(vec![Vec::new(); self.size as usize]);
        }
        let mut padded = mine.to_vec();
        padded.resize(longest, 0);
        let all = self.round(&padded)?;
        Ok(all
            .chunks_exact(longest)
            .zip(&lens)
            .map(|(chunk, &len)| chunk[..len as usize].to_vec())
            .collect())
    }
}
