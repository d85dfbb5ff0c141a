// ---- reasons in plain words ----------------------------------------------------------------
//
// Reasons carry the standards' codes ("AK5-2 at segment 4 (byte 198): …", TA1 notes, EDIFACT
// CONTRL codes) or the gateway's own wording ("over quota: …"). `plainReason(reason)` gives a
// sentence for people beside them: the code tables below are the X12 and EDIFACT code lists
// (TA1 I18, AK9 716, AK5/IK5 718 and 717, AK3/IK3 720, AK4/IK4 723, CONTRL 0085); the gateway's
// reasons are matched by their opening words. An unknown reason gets no sentence.

const TA1_NOTES = {
  "000": "no error", "001": "the interchange control numbers in ISA13 and IEA02 differ",
  "002": "this control standard is not supported", "003": "this version of the controls is not supported",
  "004": "the segment terminator is invalid", "005": "the sender's id qualifier (ISA05) is invalid",
  "006": "the sender's id (ISA06) is invalid", "007": "the receiver's id qualifier (ISA07) is invalid",
  "008": "the receiver's id (ISA08) is invalid", "009": "the receiver's id is unknown",
  "010": "the authorization information qualifier (ISA01) is invalid",
  "011": "the authorization information (ISA02) is invalid",
  "012": "the security information qualifier (ISA03) is invalid",
  "013": "the security information (ISA04) is invalid", "014": "the interchange date (ISA09) is invalid",
  "015": "the interchange time (ISA10) is invalid", "016": "the standards identifier or repetition separator (ISA11) is invalid",
  "017": "the version (ISA12) is invalid", "018": "the interchange control number (ISA13) is invalid",
  "019": "the acknowledgment-requested flag (ISA14) is invalid", "020": "the test indicator (ISA15) is invalid",
  "021": "the number of groups declared in IEA01 differs from the groups sent",
  "022": "the envelope's structure is invalid", "023": "the file ends before the interchange does (no IEA)",
  "024": "the interchange's content is invalid (a segment where the envelope allows none)",
  "025": "the interchange control number was used before", "026": "the data element separator is invalid",
  "027": "the component element separator (ISA16) is invalid",
  "028": "the deferred delivery date is invalid", "029": "the deferred delivery time is invalid",
  "030": "the deferred delivery time code is invalid", "031": "the grade of service code is invalid",
};
const AK9_CODES = {
  1: "the functional group is not supported", 2: "the functional group's version is not supported",
  3: "the functional group has no trailer (GE)", 4: "the group control numbers in GS06 and GE02 differ",
  5: "the number of transaction sets declared in GE01 differs from the sets sent",
  6: "the group control number violates the syntax", 19: "the group control number is not unique in the interchange",
};
const AK5_CODES = {
  1: "this transaction set is not supported", 2: "the transaction set has no trailer (SE)",
  3: "the transaction set control numbers in ST02 and SE02 differ",
  4: "the segment count in SE01 differs from the segments sent", 5: "one or more segments are in error",
  6: "the transaction set identifier is missing or invalid", 7: "the transaction set control number is missing or invalid",
  18: "the transaction set is outside any functional group (no GS before it)",
  19: "the implementation convention reference is invalid",
  23: "the transaction set control number is not unique in the group",
};
const ACK_STATUS = {
  A: "accepted", E: "accepted, with errors noted", P: "partly accepted", R: "rejected",
  M: "rejected: the message authentication code failed", W: "rejected: it failed validity tests",
  X: "rejected: its content could not be analysed after decryption",
};
const AK3_CODES = {
  1: "a segment id is not recognised", 2: "a segment is not expected there", 3: "a required segment is missing",
  4: "a loop occurs more often than allowed", 5: "a segment occurs more often than allowed",
  6: "a segment is not in the transaction set's definition", 7: "a segment is out of order",
  8: "a segment has data element errors", I4: "a segment marked \"not used\" is present",
  I6: "a segment the implementation needs is missing", I7: "a loop occurs fewer times than required",
  I8: "a segment occurs fewer times than required", I9: "a segment marked \"dependent, not used\" is present",
};
const AK4_CODES = {
  1: "a required data element is missing", 2: "a conditionally required data element is missing",
  3: "there are too many data elements", 4: "a data element is too short", 5: "a data element is too long",
  6: "a data element holds an invalid character", 7: "a data element holds an invalid code value",
  8: "a date is invalid", 9: "a time is invalid", 10: "an exclusion condition is violated",
  12: "a data element repeats too often", 13: "a data element has too many components",
  I6: "a code value is not used in this implementation", I9: "a data element the implementation needs is missing",
  I10: "a data element marked \"not used\" is present", I11: "a data element repeats too few times",
  I12: "a data element does not match the required pattern",
  I13: "a data element marked \"dependent, not used\" is present",
};
const CONTRL_CODES = {
  2: "the syntax version or level is not supported", 7: "the receiver named is not the actual recipient",
  12: "a value is invalid", 13: "a required part is missing", 14: "a value is not supported in this position",
  15: "a part is not supported in this position", 16: "there are too many parts", 17: "there is no agreement for it",
  18: "an unspecified error", 19: "a decimal notation is invalid", 20: "a character is invalid as a service character",
  21: "it holds invalid characters", 22: "it holds invalid service characters", 23: "the sender is unknown",
  24: "it is too old", 25: "the test indicator is not supported", 26: "it is a duplicate",
  28: "the references in header and trailer differ", 29: "a control count differs from what was sent",
  30: "functional groups and messages are mixed", 31: "a group holds more than one message type",
  32: "a lower level is empty", 33: "a segment is outside any message, package or group",
  35: "a segment repeats too often", 36: "a segment group repeats too often", 37: "a character is of an invalid type",
  39: "a data element is too long", 40: "a data element is too short",
};
// What each code's prefix is about, and where its codes come from.
const CODE_LISTS = {
  TA1: ["the interchange envelope (ISA/IEA)", TA1_NOTES],
  AK9: ["the functional group (GS/GE)", AK9_CODES],
  AK5: ["the transaction set (ST/SE)", AK5_CODES], IK5: ["the transaction set (ST/SE)", AK5_CODES],
  AK3: ["a segment", AK3_CODES], IK3: ["a segment", AK3_CODES],
  AK4: ["a data element", AK4_CODES], IK4: ["a data element", AK4_CODES],
  UCI: ["the interchange envelope (UNB/UNZ)", CONTRL_CODES], UCF: ["the functional group (UNG/UNE)", CONTRL_CODES],
  UCM: ["the message (UNH/UNT)", CONTRL_CODES], FILE: ["the file", {}],
};

// The gateway's own reasons, by their opening words: [pattern, sentence from the match].
const GATEWAY_REASONS = [
  [/^over quota: \S+ allows (\d+) per (\d+) (\w+)/, (m) => `Held: this partner has used its allowance on this route (${num(m[1])} units per ${m[2] === "1" ? "" : m[2] + " "}${m[3]}); it goes on by itself when the window resets, or when someone releases it.`],
  [/^over quota/, () => "Held: this partner has used its allowance on this route; it goes on by itself when the window resets, or when someone releases it."],
  [/^waiting behind earlier held interchanges/, () => "Held to keep the order: earlier interchanges of this partner on this route are still held; it follows them."],
  [/^split: (\d+) of (\d+) transactions/, (m) => `Partly sent: ${num(m[1])} of ${num(m[2])} transactions fitted the allowance and went on; the rest waits for the next window.`],
  [/^transactions 1-(\d+) of (\d+) split off/, (m) => `The first ${num(m[1])} of ${num(m[2])} transactions of a larger interchange: the part that fitted the allowance.`],
  [/^quota unavailable/, () => "Held: the quota service did not answer; the gateway tries again by itself."],
  [/^quota misconfigured/, () => "Held: the quota settings are wrong; an administrator must fix the configuration."],
  [/^delivered without metering/, () => "Delivered without being counted: the quota service did not answer and the route lets traffic through then."],
  [/^fingerprint store unavailable/, () => "Held: the check for resent transactions could not run; the gateway tries again by itself."],
  [/^gave up after (\d+) delivery attempts/, (m) => `Not delivered: the destination failed ${num(m[1])} times in a row; retry it once the destination works again.`],
  [/^delivery refused/, () => "Not delivered: the destination refused it; retry it once the destination accepts it."],
  [/^weight (\d+) exceeds the limit (\d+)/, (m) => `Never fits: it weighs ${num(m[1])} units, more than the whole allowance of ${num(m[2])}; raise the limit or let the route split interchanges.`],
  [/^transaction (\d+) alone weighs (\d+), more than the limit (\d+)/, (m) => `Never fits: transaction ${m[1]} alone weighs ${num(m[2])} units, more than the whole allowance of ${num(m[3])}.`],
  [/^duplicate of interchange \S+ from .* received within (\d+) days/, (m) => `Not sent again: the same interchange (same sender, receiver and control number) arrived within the last ${num(m[1])} days.`],
  [/^all (\d+) transactions were sent before .* within (\d+) days(?: \(first as item (\S+)\))?/, (m) => `Not sent again: all ${num(m[1])} transactions were already sent within the last ${num(m[2])} days, under another envelope` + (m[3] ? ` (first as item ${m[3]})` : "") + "."],
  [/^transactions (\S+) of (\d+) in interchange .* were sent before/, (m) => `Partly a resend: transactions ${m[1]} of ${num(m[2])} were already sent and are kept back here; the others go on.`],
  [/^no route for document (.*)$/, (m) => `Not delivered: no route is configured for document ${m[1]}.`],
  [/^not EDI/, () => "Not delivered: the file holds no X12 or EDIFACT interchange."],
  [/^bytes \d+\.\.\d+ of the file are outside every interchange/, () => "Not delivered: these bytes of the file belong to no interchange."],
  [/^the parser failed on this file/, () => "Not delivered: the file could not be read; its bytes are kept for an operator."],
  [/^spool file unreadable/, () => "Not delivered: the stored copy of the file could not be read."],
];

// A sentence for an envelope error code ("AK5", "2", segment, byte), or "".
function codeSentence(prefix, code, segment, byte) {
  const list = CODE_LISTS[prefix];
  if (!list) return "";
  const [where, codes] = list;
  const what = code ? codes[code] || codes[String(Number(code))] : "";
  let text = what ? what[0].toUpperCase() + what.slice(1)
    : prefix === "FILE" ? "The file holds bytes outside any interchange"
    : `A problem in ${where}`;
  // EDIFACT's codes say what, not where.
  if (what && codes === CONTRL_CODES) text += ` in ${where}`;
  if (Number(segment) > 0) text += ` — segment ${num(segment)} of the interchange`;
  if (byte !== undefined) text += (Number(segment) > 0 ? ", byte " : " — byte ") + `${num(byte)} of the file`;
  return text + ".";
}

// The reason in plain words: the gateway's meaning and the meaning of a code in it.
function plainReason(reason) {
  if (!reason) return "";
  const text = String(reason);
  const out = [];
  for (const [re, say] of GATEWAY_REASONS) {
    const m = re.exec(text);
    if (m) {
      out.push(say(m));
      break;
    }
  }
  const coded = /\b(TA1|AK9|AK5|IK5|AK3|IK3|AK4|IK4|UCI|UCF|UCM|FILE)(?:-([A-Z]?\d+))? at segment (\d+) \(byte (\d+)\)/.exec(text)
    || /\b(TA1|AK9|AK5|IK5|AK3|IK3|AK4|IK4|UCI|UCF|UCM)-([A-Z]?\d+)\b/.exec(text);
  if (coded) out.push(codeSentence(coded[1], coded[2], coded[3], coded[4]));
  const status = /\b(AK5|IK5|AK9)[*\s:]+([AEMPRWX])\b/.exec(text);
  if (status) out.push(`The acknowledgement says the ${status[1] === "AK9" ? "group" : "transaction set"} was ${ACK_STATUS[status[2]]}.`);
  return out.join(" ");
}

// A reason for a table cell: the reason as received, and its sentence below it.
function reasonNode(text) {
  if (!text) return "";
  const said = plainReason(text);
  return el("span", { class: "reason" }, el("span", { class: "code" }, text),
    said ? el("span", { class: "plain" }, said) : null);
}
