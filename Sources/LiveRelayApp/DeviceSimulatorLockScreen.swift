import Foundation
import JSON
import LiveRelayCore

/// What a lock screen would show for one activity, as a small text box:
///
/// ```
/// +-----------------------------------------------+
/// | delivery                  tgt_01JA…  (remote) |
/// | ! Preparing: Your order is being prepared     |
/// | message: Preparing                            |
/// | revision 1                                    |
/// +-----------------------------------------------+
/// ```
/// The first line is the activity type and target (`remote, channel` / `local, channel` for an
/// activity subscribed to a broadcast channel); an alert line (`! title: body`) when the
/// last applied push carried one; one `key: value` line per state field (sorted; nested values
/// as compact JSON); `[placeholder] …` when the state could not be rendered; then `Ended` or
/// `Dismissed (removed from the lock screen)` for an ended activity.
public enum LockScreen {
    public static let maxWidth = 64

    public static func lines(_ a: SimulatedActivity, now: Date) -> [String] {
        var out: [String] = []
        let origin = (a.origin == "local" ? "local" : "remote") + (a.channelId != nil ? ", channel" : "")
        out.append("\(a.activityType)  \(a.targetId)  (\(origin))")
        if a.phase == .dismissed {
            out.append("Dismissed (removed from the lock screen)")
            return out
        }
        if let al = a.alert { out.append("! \(al.title)" + (al.body.isEmpty ? "" : ": \(al.body)")) }
        if let p = a.placeholder {
            out.append("[placeholder] \(p)")
        }
        if case .object(let o) = a.state {
            for k in o.keys.sorted() {
                let v = o[k]!
                out.append("\(k): \(v.stringValue ?? v.jsonString)")
            }
        }
        var meta: [String] = []
        if let r = a.revision { meta.append("revision \(r)") }
        if let s = a.staleDate, s <= Timestamp.epochSeconds(now) { meta.append("stale") }
        if !meta.isEmpty { out.append(meta.joined(separator: " · ")) }
        if a.phase == .ended {
            var line = "Ended"
            if let d = a.dismissAt { line += " (stays until \(Timestamp.format(Date(timeIntervalSince1970: Double(d)))))" }
            out.append(line)
        }
        return out
    }

    /// The box around `lines(a, now:)`.
    public static func render(_ a: SimulatedActivity, now: Date) -> String {
        box(lines(a, now: now))
    }

    static func box(_ lines: [String]) -> String {
        let clipped = lines.map { l -> String in
            l.count > maxWidth ? String(l.prefix(maxWidth - 1)) + "…" : l
        }
        let width = clipped.map(\.count).max() ?? 0
        let edge = "+" + String(repeating: "-", count: width + 2) + "+"
        return ([edge] + clipped.map { "| " + $0 + String(repeating: " ", count: width - $0.count) + " |" } + [edge]).joined(separator: "\n")
    }

    /// Every activity still on the lock screen (dismissed ones are gone), or a note when none.
    public static func screen(_ s: DeviceSimulatorState, now: Date) -> String {
        let visible = s.activities.filter { $0.phase != .dismissed }
        if visible.isEmpty { return "(lock screen: no live activities)" }
        return visible.map { render($0, now: now) }.joined(separator: "\n")
    }
}
