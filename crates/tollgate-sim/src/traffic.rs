//! Traffic: the interchanges a scenario offers, drawn from a seeded generator, and their bytes
//! (real X12 and EDIFACT that the gateway's parser reads like any partner's).
//!
//! Arrivals are kept as small records and built into bytes only when they are offered, so a
//! long scenario does not hold every interchange in memory.

use std::fmt::Write;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::scenario::{Records, Scenario};

/// What kind of interchange an arrival is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// The partner's ordinary traffic.
    Ordinary,
    /// A new interchange sent in a burst.
    Burst,
    /// A copy (same control number and content) of an earlier interchange, sent in a burst.
    Copy,
    /// A malformed interchange sent in a burst.
    Invalid,
}

/// One interchange offered to the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Arrival {
    /// Milliseconds after the scenario's start.
    pub at_ms: i64,
    /// Index of the partner in the scenario.
    pub partner: usize,
    /// Interchange control number (a copy repeats the original's).
    pub control: u32,
    /// Index of the document type in the partner's `documents`.
    pub document: usize,
    /// Records (transactions) in it.
    pub records: u32,
    /// What it is.
    pub kind: Kind,
}

/// Every arrival of the scenario, in time order (ties by partner), from `seed`.
pub fn arrivals(s: &Scenario, seed: u64) -> Vec<Arrival> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut all = Vec::new();
    let mut next_control: Vec<u32> = vec![1; s.partners.len()];
    for (pi, p) in s.partners.iter().enumerate() {
        let rate = *p.rate_per_hour.get_ref();
        let profile: Vec<f64> = p.profile.as_ref().map_or(vec![1.0; 24], |v| v.get_ref().clone());
        let peak = profile.iter().copied().fold(0.0, f64::max);
        if rate <= 0.0 || peak <= 0.0 {
            continue;
        }
        // Thinning: candidates at the peak rate, each kept with probability profile/peak.
        let per_ms = rate * peak / 3_600_000.0;
        let docs = p.documents.get_ref().len();
        let mut t = 0.0f64;
        loop {
            let u: f64 = rng.random_range(f64::EPSILON..1.0);
            t += -u.ln() / per_ms;
            if t >= s.length_ms as f64 {
                break;
            }
            let at_ms = t as i64;
            let hour = (s.start.as_millisecond() + at_ms).rem_euclid(86_400_000) / 3_600_000;
            let keep: f64 = rng.random_range(0.0..1.0);
            if keep * peak >= profile[hour as usize] {
                continue;
            }
            all.push(Arrival {
                at_ms,
                partner: pi,
                control: 0,
                document: rng.random_range(0..docs),
                records: draw(&mut rng, *p.records.get_ref()),
                kind: Kind::Ordinary,
            });
        }
    }
    for b in &s.bursts {
        let Some(pi) = s.partners.iter().position(|p| p.name.get_ref() == b.partner.get_ref())
        else {
            continue;
        };
        let count = *b.count.get_ref();
        let copies = (count as f64 * b.copies.get_ref()).round() as u64;
        let invalid = (count as f64 * b.invalid.get_ref()).round() as u64;
        let mut kinds: Vec<Kind> = (0..count)
            .map(|i| match i {
                i if i < copies => Kind::Copy,
                i if i < copies + invalid => Kind::Invalid,
                _ => Kind::Burst,
            })
            .collect();
        // Fisher–Yates with the seeded generator.
        for i in (1..kinds.len()).rev() {
            let j = rng.random_range(0..=i);
            kinds.swap(i, j);
        }
        let start = b.start_hours.get_ref() * 3_600_000.0;
        let span = b.minutes.get_ref() * 60_000.0;
        let records =
            b.records.as_ref().map_or(*s.partners[pi].records.get_ref(), |r| *r.get_ref());
        let docs = s.partners[pi].documents.get_ref().len();
        let mut times: Vec<i64> = (0..count)
            .map(|_| (start + rng.random_range(0.0..1.0) * span) as i64)
            .filter(|&t| t < s.length_ms)
            .collect();
        times.sort_unstable();
        for (at_ms, kind) in times.into_iter().zip(kinds) {
            all.push(Arrival {
                at_ms,
                partner: pi,
                control: 0,
                document: rng.random_range(0..docs),
                records: draw(&mut rng, records),
                kind,
            });
        }
    }
    all.sort_by_key(|a| (a.at_ms, a.partner, a.kind));
    // Control numbers in arrival order per partner; a copy repeats an earlier interchange.
    let mut sent: Vec<Vec<usize>> = vec![Vec::new(); s.partners.len()];
    for i in 0..all.len() {
        let pi = all[i].partner;
        if all[i].kind == Kind::Copy {
            if let Some(&orig) = pick(&mut rng, &sent[pi]) {
                let o = all[orig];
                all[i] = Arrival { at_ms: all[i].at_ms, kind: Kind::Copy, ..o };
                continue;
            }
            all[i].kind = Kind::Burst; // nothing earlier to copy
        }
        all[i].control = next_control[pi];
        next_control[pi] = next_control[pi] % 999_999_999 + 1;
        if all[i].kind != Kind::Invalid {
            sent[pi].push(i);
        }
    }
    all
}

fn pick<'a, T>(rng: &mut StdRng, v: &'a [T]) -> Option<&'a T> {
    if v.is_empty() { None } else { v.get(rng.random_range(0..v.len())) }
}

fn draw(rng: &mut StdRng, r: Records) -> u32 {
    let (a, b) = r.bounds();
    if a >= b { a } else { rng.random_range(a..=b) }
}

/// The bytes of an arrival from `sender` (`QUAL:ID`): an X12 interchange for a numeric
/// document type, EDIFACT otherwise; an `Invalid` one is cut off before its trailers.
pub(crate) fn build(a: &Arrival, sender: &str, document: &str) -> Vec<u8> {
    let (qual, id) = sender.split_once(':').unwrap_or(("ZZ", sender));
    let c = a.control;
    let mut s = String::with_capacity(200 + 60 * a.records as usize);
    if document.chars().all(|ch| ch.is_ascii_digit()) {
        let _ = writeln!(
            s,
            "ISA*00*          *00*          *{qual:<2}*{id:<15}*ZZ*{:<15}*260101*1200*U*00401*{c:09}*0*P*>~",
            "TOLLGATESIM"
        );
        let _ = writeln!(s, "GS*QM*{id}*TOLLGATESIM*20260101*1200*{c}*X*004010~");
        for t in 1..=a.records {
            let _ = writeln!(
                s,
                "ST*{document}*{t:04}~\nB10*REF{c}-{t}*SHIP{c}-{t}*SCAC~\nAT7*X1*NS***20260101*1200~\nSE*4*{t:04}~"
            );
        }
        if a.kind == Kind::Invalid {
            return s.into_bytes();
        }
        let _ = write!(s, "GE*{}*{c}~\nIEA*1*{c:09}~\n", a.records);
    } else {
        let _ = writeln!(s, "UNB+UNOA:3+{id}:{qual}+TOLLGATESIM:ZZ+260101:1200+{c}'");
        for t in 1..=a.records {
            let _ = writeln!(
                s,
                "UNH+{t}+{document}:D:01B:UN'\nBGM+23+REF{c}-{t}+9'\nSTS+1+X1'\nUNT+4+{t}'"
            );
        }
        if a.kind == Kind::Invalid {
            return s.into_bytes();
        }
        let _ = writeln!(s, "UNZ+{}+{c}'", a.records);
    }
    s.into_bytes()
}
