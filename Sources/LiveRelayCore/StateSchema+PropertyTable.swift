import JSON

/// A node's `properties`, looked up by the exact UTF-8 bytes of a member name (JSON Schema
/// compares names by code points, without Unicode normalisation).
///
/// Open addressing with FNV-1a: far cheaper per lookup than `Dictionary<String, _>`'s seeded
/// SipHash, which dominated validation time.
struct PropertyTable: Sendable {
    /// Member names as UTF-8, by entry.
    let names: [[UInt8]]
    let nodes: [SchemaNode]
    /// Whether the entry's name is listed in `required`.
    let isRequired: [Bool]
    /// How many entries are required.
    let requiredCount: Int
    /// Entry index per slot, -1 when empty; count is a power of two ≥ 2 × entries.
    private let slots: [Int32]
    private let mask: Int

    var isEmpty: Bool { names.isEmpty }

    init(_ properties: [(name: String, node: SchemaNode)], required: [String]) {
        let requiredBytes = Set(required.map { Array($0.utf8) })
        names = properties.map { Array($0.name.utf8) }
        nodes = properties.map(\.node)
        isRequired = names.map { requiredBytes.contains($0) }
        requiredCount = isRequired.filter { $0 }.count
        var capacity = 4
        while capacity < properties.count * 2 { capacity <<= 1 }
        var slots = [Int32](repeating: -1, count: capacity)
        for (i, name) in names.enumerated() {
            var s = name.withUnsafeBufferPointer { Int(truncatingIfNeeded: Self.hash($0)) } & (capacity - 1)
            while slots[s] >= 0 { s = (s + 1) & (capacity - 1) }
            slots[s] = Int32(i)
        }
        self.slots = slots
        mask = capacity - 1
    }

    @inline(__always)
    static func hash(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in bytes { h = (h ^ UInt64(b)) &* 0x0000_0100_0000_01b3 }
        return h ^ (h >> 29)
    }

    /// Byte equality of two buffers of the same length, 8 bytes at a time.
    @inline(__always)
    static func equal(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Bool {
        let n = a.count
        guard n > 0, let pa = a.baseAddress, let pb = b.baseAddress else { return true }
        let ra = UnsafeRawPointer(pa), rb = UnsafeRawPointer(pb)
        var i = 0
        while i + 8 <= n {
            if ra.loadUnaligned(fromByteOffset: i, as: UInt64.self) != rb.loadUnaligned(fromByteOffset: i, as: UInt64.self) { return false }
            i += 8
        }
        while i < n {
            if pa[i] != pb[i] { return false }
            i += 1
        }
        return true
    }

    /// The entry index of member `name`, or nil.
    @inline(__always)
    func find(_ name: String) -> Int? {
        if names.isEmpty { return nil }
        if let r = name.utf8.withContiguousStorageIfAvailable({ find(bytes: $0) }) { return r }
        return Array(name.utf8).withUnsafeBufferPointer { find(bytes: $0) }
    }

    private func find(bytes: UnsafeBufferPointer<UInt8>) -> Int? {
        var s = Int(truncatingIfNeeded: Self.hash(bytes)) & mask
        while true {
            let e = Int(slots[s])
            if e < 0 { return nil }
            let match = names[e].withUnsafeBufferPointer { $0.count == bytes.count && Self.equal($0, bytes) }
            if match { return e }
            s = (s + 1) & mask
        }
    }
}

extension SchemaJSON {
    /// Whether object `o` has a member named exactly `name` (byte equality; `Dictionary` alone
    /// would also match a canonically equivalent spelling).
    @inline(__always)
    static func hasMember(_ o: [String: JSONValue], _ name: String) -> Bool {
        guard let i = o.index(forKey: name) else { return false }
        return o[i].key.utf8.elementsEqual(name.utf8)
    }

    /// `JSONValue.depth` without allocating: scalars 0, `[]`/`{}` 1.
    static func depth(_ v: JSONValue) -> Int {
        switch v {
        case .array(let a):
            var m = 0
            for x in a { m = max(m, depth(x)) }
            return 1 + m
        case .object(let o):
            var m = 0
            for x in o.values { m = max(m, depth(x)) }
            return 1 + m
        default:
            return 0
        }
    }
}
