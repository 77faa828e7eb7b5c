//! Owners and UPDATE sequences: forged owner references, leaving the queue, dropping the selector or priority by update.
