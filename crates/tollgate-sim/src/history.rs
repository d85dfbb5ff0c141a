//! Traffic history read from a CSV export (time, partner, document, records).
