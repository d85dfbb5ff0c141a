//! Window arithmetic: which window an instant falls in, and when it starts and ends.
