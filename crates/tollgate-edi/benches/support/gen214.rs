//! Generates batches of X12 214 shipment status messages (about 10 AT7 events per shipment),
//! shared by the `scan` bench and the `stream` example.

#![allow(dead_code)]

/// What the generator wrote, to check the scan against.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    pub interchanges: u64,
    pub transactions: u64,
    pub at7: u64,
    pub bytes: u64,
}

/// Shipments per interchange (one batch).
pub const SHIPMENTS_PER_BATCH: usize = 500;

/// One interchange: `SHIPMENTS_PER_BATCH` 214s, 8 to 12 AT7 each, `~` plus LF after segments.
pub fn batch(n: u64, out: &mut Vec<u8>, expected: &mut Expected) {
    use std::io::Write;
    let start = out.len();
    let cn = n % 1_000_000_000;
    let _ = write!(
        out,
        "ISA*00*          *00*          *02*SCAC           *ZZ*ACMEERP        *240102*0930*U*00401*{cn:09}*0*P*>~\n\
         GS*QM*SCAC*ACMEERP*20240102*0930*{cn}*X*004010~\n"
    );
    for s in 0..SHIPMENTS_PER_BATCH {
        let events = 8 + (s % 5);
        let segments = 11 + 2 * events;
        let _ = write!(
            out,
            "ST*214*{s:04}~\nB10*PRO{n}{s:05}*SHP{s:07}*SCAC~\nL11*PO{s:06}*PO~\n\
             N1*SH*ACME PLANT 7*93*ACME07~\nN3*100 INDUSTRIAL WAY~\nN4*DAYTON*OH*45402*US~\n\
             N1*CN*BIGBOX STORE 1123*93*BB1123~\nN3*4500 MARKET ST~\nN4*COLUMBUS*OH*43215*US~\n\
             LX*1~\n"
        );
        for e in 0..events {
            let _ = write!(
                out,
                "AT7*X{}*NS***202401{:02}*{:02}{:02}*ET~\nMS1*COLUMBUS*OH*US~\n",
                e % 7,
                1 + e % 28,
                e % 24,
                (e * 7) % 60
            );
        }
        let _ = writeln!(out, "SE*{segments}*{s:04}~");
        expected.transactions += 1;
        expected.at7 += events as u64;
    }
    let _ = write!(out, "GE*{SHIPMENTS_PER_BATCH}*{cn}~\nIEA*1*{cn:09}~\n");
    expected.interchanges += 1;
    expected.bytes += (out.len() - start) as u64;
}

/// Whole batches until at least `target` bytes, in memory.
pub fn generate(target: usize) -> (Vec<u8>, Expected) {
    let mut out = Vec::with_capacity(target + 1_000_000);
    let mut expected = Expected::default();
    let mut n = 1;
    while out.len() < target {
        batch(n, &mut out, &mut expected);
        n += 1;
    }
    (out, expected)
}
