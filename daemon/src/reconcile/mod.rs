//! The controller: watches, server-side apply of the desired objects, pruning, status, leader election; does I/O.
