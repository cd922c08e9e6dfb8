import Foundation
import Locking

/// Kinds of resource id and their type prefixes (docs/http-conventions.md "Ids are opaque strings with a
/// type prefix"). Ids are `<prefix>_<26 chars>`: the 26 characters are the lowercase Crockford
/// base32 encoding of a UUIDv7-style 128-bit value (48-bit Unix milliseconds, a 12-bit counter,
/// then random bits), so ids sort by creation time (and, within one process, by creation order) and keyset pagination over them is stable.
public enum IdKind: String, Sendable, CaseIterable {
    case tenant = "ten"
    case operatorKey = "opk"
    case masterKey = "mk"
    case senderKey = "sk"
    case publishableKey = "pk"
    case installation = "ins"
    case installationCredential = "ic"
    case binding = "bnd"
    case startTarget = "st"
    case target = "tgt"
    case operation = "op"
    /// Audit events and webhook events share `evt_` (docs/http-conventions.md lists one prefix for events).
    case auditEvent = "evt"
    case webhookEndpoint = "we"
    /// A channel (docs/channels.md).
    case channel = "ch"
    /// One accepted channel write (docs/channels.md).
    case channelOperation = "cop"
}

/// Generates and checks prefixed, time-ordered identifiers (docs/http-conventions.md).
public enum Identifier {
    /// Number of base32 characters after `<prefix>_`.
    public static let bodyLength = 26

    /// A new id of `kind` created at `now` (millisecond resolution), e.g. `mk_06f3k…`.
    public static func make(_ kind: IdKind, now: Date = Date()) -> String {
        kind.rawValue + "_" + makeBody(now: now)
    }

    /// The 26-character body: 48-bit milliseconds since 1970, the version nibble, a 12-bit
    /// counter, the variant bits, then 62 random bits, Crockford base32 (UUIDv7 with a dedicated
    /// counter, RFC 9562 §6.2 method 1). Within one process, ids made for the same millisecond
    /// sort in the order they were made: the counter starts at a random value below 2048 the
    /// first time a millisecond is seen and counts up; when it would overflow, that
    /// millisecond's ids borrow the next millisecond. The last few milliseconds are remembered
    /// separately, so a caller passing another instant (an injected clock) does not break the
    /// sequence of ids made at the real time.
    public static func makeBody(now: Date = Date()) -> String {
        var rng = SystemRandomNumberGenerator()
        let requested = milliseconds(now)
        let (ms, counter) = sequences.withLock { table -> (UInt64, UInt16) in
            if let i = table.firstIndex(where: { $0.clockMs == requested }) {
                if table[i].counter < 0x0FFF {
                    table[i].counter += 1
                } else {
                    table[i].ms += 1
                    table[i].counter = UInt16.random(in: 0..<0x0800, using: &rng)
                }
                return (table[i].ms, table[i].counter)
            }
            let fresh = Sequence(clockMs: requested, ms: requested, counter: UInt16.random(in: 0..<0x0800, using: &rng))
            if table.count >= 8 { table.removeFirst() }
            table.append(fresh)
            return (fresh.ms, fresh.counter)
        }
        var bytes = timeBytes(ms)
        bytes[6] = 0x70 | UInt8(counter >> 8)  // UUID version 7, counter high nibble
        bytes[7] = UInt8(truncatingIfNeeded: counter)
        // One 64-bit draw for the 8 random bytes (a draw per byte was a getrandom call per byte:
        // ~3 % of the process's CPU in deploy/bench/fanout, which makes an id per member).
        let random = rng.next()
        for i in 8..<16 { bytes[i] = UInt8(truncatingIfNeeded: random >> (8 * (15 - i))) }
        bytes[8] = (bytes[8] & 0x3F) | 0x80  // RFC 4122 variant
        return CrockfordBase32.encode128(bytes)
    }

    /// Unix milliseconds of `date` (0 before 1970).
    static func milliseconds(_ date: Date) -> UInt64 { UInt64(max(0, date.timeIntervalSince1970 * 1000)) }

    /// 16 bytes: `ms` big-endian in the first 6, zeros after.
    static func timeBytes(_ ms: UInt64) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 16)
        for i in 0..<6 { bytes[i] = UInt8(truncatingIfNeeded: ms >> (8 * (5 - i))) }
        return bytes
    }

    /// The counter of one recently seen millisecond.
    struct Sequence: Sendable {
        /// The millisecond callers asked for.
        var clockMs: UInt64
        /// The millisecond written into its ids; ahead of `clockMs` after a counter overflow.
        var ms: UInt64
        var counter: UInt16
    }

    /// The 8 most recently seen milliseconds, oldest first.
    static let sequences = Locked([Sequence]())

    /// True when `id` has the form `<kind prefix>_<26 lowercase Crockford base32 chars>`.
    public static func isValid(_ id: String, kind: IdKind) -> Bool {
        let prefix = kind.rawValue + "_"
        guard id.hasPrefix(prefix) else { return false }
        return isValidBody(Substring(id.utf8.dropFirst(prefix.utf8.count)))
    }

    /// True when `body` is exactly 26 lowercase Crockford base32 characters.
    public static func isValidBody(_ body: Substring) -> Bool {
        body.utf8.count == bodyLength && body.utf8.allSatisfy { CrockfordBase32.value(of: $0) != nil }
    }
}

/// Lowercase Crockford base32 (alphabet `0-9a-z` without i, l, o, u); ASCII order equals
/// numeric order, which keeps ids sortable.
public enum CrockfordBase32 {
    static let alphabet: [UInt8] = Array("0123456789abcdefghjkmnpqrstvwxyz".utf8)

    /// Encodes 16 bytes as 26 characters (the first character carries the top 3 bits... of 130
    /// bit positions, the top 2 being zero).
    public static func encode128(_ bytes: [UInt8]) -> String {
        precondition(bytes.count == 16)
        var hi: UInt64 = 0, lo: UInt64 = 0
        for i in 0..<8 { hi = hi << 8 | UInt64(bytes[i]) }
        for i in 8..<16 { lo = lo << 8 | UInt64(bytes[i]) }
        var out = [UInt8](repeating: 0, count: 26)
        for n in 0..<26 {
            let shift = 5 * (25 - n)  // bit offset from the least significant end of 130 bits
            var v: UInt64
            if shift >= 64 {
                v = hi >> UInt64(shift - 64)
            } else if shift + 5 <= 64 {
                v = lo >> UInt64(shift)
            } else {
                v = (lo >> UInt64(shift)) | (hi << UInt64(64 - shift))
            }
            out[n] = alphabet[Int(v & 31)]
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Value 0–31 of one alphabet character, nil if it is not one.
    public static func value(of c: UInt8) -> Int? {
        switch c {
        case 0x30...0x39: return Int(c - 0x30)
        case 0x61...0x68: return Int(c - 0x61) + 10  // a-h
        case 0x6A, 0x6B: return Int(c - 0x6A) + 18  // j k
        case 0x6D, 0x6E: return Int(c - 0x6D) + 20  // m n
        case 0x70...0x74: return Int(c - 0x70) + 22  // p-t
        case 0x76...0x7A: return Int(c - 0x76) + 27  // v-z
        default: return nil
        }
    }
}
