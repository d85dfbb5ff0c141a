//! The subject of a peer certificate as an RFC 4514 string (`CN=edi.acme.example,O=Acme`),
//! read from the certificate's DER with just enough of a DER reader to walk to the subject.
//!
//! RFC 4514 order is the reverse of the order in the certificate (the most specific name
//! first, as `openssl x509 -subject -nameopt RFC2253` prints it). Known attribute types get
//! their short names (CN, O, OU, C, L, ST, DC, UID, emailAddress); others are written as a
//! dotted OID. String values are escaped per RFC 4514; values of other types are written as
//! `#` and their hex DER.

/// One DER element: its tag, its content, and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;

/// The subject of the X.509 certificate `der`, or `None` when it cannot be read.
pub fn of(der: &[u8]) -> Option<String> {
    let (tag, cert, _) = element(der)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, tbs, _) = element(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut rest = tbs;
    // [0] version (optional), serial, signature algorithm, issuer, validity, subject.
    let (tag, _, after) = element(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    for _ in 0..4 {
        let (_, _, after) = element(rest)?;
        rest = after;
    }
    let (tag, name, _) = element(rest)?;
    if tag != SEQUENCE {
        return None;
    }
    name_string(name)
}

/// RFC 4514 text of a Name's content (a sequence of RDN sets).
fn name_string(mut name: &[u8]) -> Option<String> {
    let mut rdns = Vec::new();
    while !name.is_empty() {
        let (tag, set, after) = element(name)?;
        if tag != SET {
            return None;
        }
        name = after;
        let mut parts = Vec::new();
        let mut set = set;
        while !set.is_empty() {
            let (tag, atv, after) = element(set)?;
            if tag != SEQUENCE {
                return None;
            }
            set = after;
            let (tag, oid, value) = element(atv)?;
            if tag != OID {
                return None;
            }
            let (vtag, vcontent, _) = element(value)?;
            parts.push(format!("{}={}", attribute_name(oid), value_string(vtag, vcontent, value)));
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

fn attribute_name(oid: &[u8]) -> String {
    let short = match oid {
        [0x55, 0x04, 0x03] => "CN",
        [0x55, 0x04, 0x06] => "C",
        [0x55, 0x04, 0x07] => "L",
        [0x55, 0x04, 0x08] => "ST",
        [0x55, 0x04, 0x0a] => "O",
        [0x55, 0x04, 0x0b] => "OU",
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => "DC",
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => "UID",
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01] => "emailAddress",
        _ => return dotted(oid),
    };
    short.to_owned()
}

fn dotted(oid: &[u8]) -> String {
    let mut arcs: Vec<u64> = Vec::new();
    let mut acc: u64 = 0;
    for b in oid {
        acc = (acc << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (acc / 40).min(2);
                arcs.push(first);
                arcs.push(acc - first * 40);
            } else {
                arcs.push(acc);
            }
            acc = 0;
        }
    }
    arcs.iter().map(u64::to_string).collect::<Vec<_>>().join(".")
}

/// The value as RFC 4514 text: escaped if a string type, else `#` + hex of its DER.
fn value_string(tag: u8, content: &[u8], der: &[u8]) -> String {
    // UTF8String, PrintableString, IA5String, TeletexString (read as UTF-8, lossily).
    if matches!(tag, 0x0c | 0x13 | 0x16 | 0x14) {
        escape(&String::from_utf8_lossy(content))
    } else {
        let (_, _, after) = element(der).unwrap_or((0, &[], &[]));
        let whole = &der[..der.len() - after.len()];
        let mut s = String::from("#");
        for b in whole {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }
}

fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        if c == '\0' {
            out.push_str("\\00");
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_is_rfc4514_most_specific_first() {
        let mut params = rcgen::CertificateParams::new(vec!["x.test".to_owned()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::CountryName, "US");
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "Acme, Inc");
        params.distinguished_name.push(rcgen::DnType::CommonName, "edi.acme.example");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(of(cert.der()).unwrap(), "CN=edi.acme.example,O=Acme\\, Inc,C=US");
    }

    #[test]
    fn garbage_is_none_not_a_panic() {
        assert_eq!(of(b""), None);
        assert_eq!(of(&[0x30, 0x82, 0xff]), None);
        assert_eq!(of(&[0x30, 0x03, 0x30, 0x01]), None);
        for n in 0..64u8 {
            let bytes: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37) ^ 0x30).collect();
            let _ = of(&bytes);
        }
    }

    #[test]
    fn dotted_oid() {
        assert_eq!(dotted(&[0x55, 0x04, 0x05]), "2.5.4.5");
        assert_eq!(dotted(&[0x2a, 0x86, 0x48]), "1.2.840");
    }
}
