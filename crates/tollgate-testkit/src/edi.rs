//! The one X12 214 (shipment status) builder of the test suites, benches and examples: a valid
//! 004010 interchange from `ZZ:<sender>`, one segment per line, sized by its transactions and
//! AT7 status events (the usual weight rule of a 214 route).

use std::fmt::Write;

/// A 214 interchange to build; [`Status214::new`] gives one transaction with one AT7.
#[derive(Debug, Clone)]
pub struct Status214 {
    sender: String,
    receiver: String,
    control: u32,
    transactions: usize,
    events: usize,
    shipment: u32,
    st_from: u32,
}

impl Status214 {
    /// One transaction with one AT7, from `ZZ:<sender>` to `ZZ:RECEIVER`, ISA13 = `control`.
    pub fn new(sender: &str, control: u32) -> Self {
        Self {
            sender: sender.to_owned(),
            receiver: "RECEIVER".to_owned(),
            control,
            transactions: 1,
            events: 1,
            shipment: 1,
            st_from: 1,
        }
    }

    /// The shipment the first transaction reports (B10 `REF<n>`/`SHIP<n>`; the next ones
    /// `n + 1`, …): what a transaction says, so the same shipment is the same update.
    pub fn shipment(mut self, n: u32) -> Self {
        self.shipment = n;
        self
    }

    /// The first transaction's control number (ST02/SE02; the next ones count up from it).
    pub fn st_from(mut self, n: u32) -> Self {
        self.st_from = n;
        self
    }

    /// The receiver id (ISA08 and GS03).
    pub fn receiver(mut self, receiver: &str) -> Self {
        self.receiver = receiver.to_owned();
        self
    }

    /// The number of 214 transactions.
    pub fn transactions(mut self, n: usize) -> Self {
        self.transactions = n.max(1);
        self
    }

    /// The number of AT7 segments per transaction.
    pub fn events(mut self, n: usize) -> Self {
        self.events = n;
        self
    }

    /// As many AT7 segments per transaction as make the interchange about `bytes` long.
    pub fn padded_to(mut self, bytes: usize) -> Self {
        let fixed = 190 + 80 * self.transactions;
        self.events = (bytes.saturating_sub(fixed) / self.transactions / AT7.len()).max(1);
        self
    }

    /// The interchange's bytes.
    pub fn build(&self) -> Vec<u8> {
        self.to_string().into_bytes()
    }
}

const AT7: &str = "AT7*X1*NS***20240101*1200~\n";

impl std::fmt::Display for Status214 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self { sender, receiver, control, transactions, events, shipment, st_from } = self;
        let mut s = String::new();
        writeln!(
            s,
            "ISA*00*          *00*          *ZZ*{sender:<15}*ZZ*{receiver:<15}*240101*1200*U*00401*{control:09}*0*P*>~"
        )?;
        writeln!(s, "GS*QM*{sender}*{receiver}*20240101*1200*{control}*X*004010~")?;
        for t in 0..*transactions as u32 {
            let (st, n) = (st_from + t, shipment + t);
            writeln!(s, "ST*214*{st:04}~\nB10*REF{n}*SHIP{n}*SCAC~")?;
            for _ in 0..*events {
                s.push_str(AT7);
            }
            writeln!(s, "SE*{}*{st:04}~", events + 3)?;
        }
        write!(s, "GE*{transactions}*{control}~\nIEA*1*{control:09}~")?;
        f.write_str(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::Status214;

    #[test]
    fn counts_and_trailers_agree() {
        let text = Status214::new("CARRIERA", 7).transactions(3).events(2).to_string();
        assert_eq!(text.matches("ST*214*").count(), 3);
        assert_eq!(text.matches("AT7*").count(), 6);
        assert!(text.contains("SE*5*0003~"), "{text}");
        assert!(text.ends_with("GE*3*7~\nIEA*1*000000007~"), "{text}");
        assert_eq!(text.split('*').nth(13), Some("000000007"));
        let later =
            Status214::new("CARRIERA", 8).shipment(40).st_from(900).transactions(2).to_string();
        assert!(later.contains("ST*214*0900~\nB10*REF40*SHIP40*SCAC~"), "{later}");
        assert!(later.contains("SE*4*0901~"), "{later}");
        let big = Status214::new("P001", 1).padded_to(100_000).build();
        assert!((90_000..=110_000).contains(&big.len()), "{}", big.len());
    }
}
