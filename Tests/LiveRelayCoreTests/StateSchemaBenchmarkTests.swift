import Foundation
import JSON
import LiveRelayCore
import XCTest

/// Throughput figures for `deploy/bench/schema`. Skipped unless `LIVERELAY_BENCH=1`; prints
/// lines starting with `schema-bench` (meaningful only in a release build).
final class StateSchemaBenchmarkTests: XCTestCase {
    /// A realistic 20-property delivery-tracking schema.
    static let schemaText = #"""
        {"type":"object","additionalProperties":false,
         "required":["status","eta","progress","driver","order_id"],
         "properties":{
          "status":{"type":"string","enum":["placed","preparing","picked_up","en_route","arriving","delivered","cancelled"]},
          "eta":{"type":"string","minLength":5,"maxLength":40},
          "eta_epoch":{"type":"integer","minimum":0},
          "progress":{"type":"number","minimum":0,"maximum":1},
          "order_id":{"type":"string","minLength":1,"maxLength":64},
          "driver":{"type":"object","required":["name"],"additionalProperties":false,
                    "properties":{"name":{"type":"string","maxLength":60},"rating":{"type":"number","minimum":0,"maximum":5},
                                  "vehicle":{"type":"string","maxLength":40},"photo":{"type":"string","maxLength":200}}},
          "stops":{"type":"array","maxItems":8,"items":{"type":"object","required":["label","done"],
                   "properties":{"label":{"type":"string","maxLength":40},"done":{"type":"boolean"}}}},
          "items_count":{"type":"integer","minimum":0,"maximum":500},
          "total":{"type":"number","minimum":0},
          "currency":{"type":"string","enum":["EUR","USD","GBP","JPY","CNY"]},
          "message":{"type":"string","maxLength":140},
          "restaurant":{"type":"string","maxLength":80},
          "tip":{"type":"number","minimum":0},
          "contactless":{"type":"boolean"},
          "delayed":{"type":"boolean"},
          "delay_minutes":{"type":"integer","minimum":0,"maximum":600},
          "map_zoom":{"type":"integer","minimum":1,"maximum":20},
          "lat":{"type":"number","minimum":-90,"maximum":90},
          "lon":{"type":"number","minimum":-180,"maximum":180},
          "note":{"type":"string","maxLength":200}
         }}
        """#

    static let stateText = #"""
        {"status":"en_route","eta":"12:45 – 12:55","eta_epoch":1793012700,"progress":0.62,"order_id":"ord_8f3a2c91",
         "driver":{"name":"Zoë Martín","rating":4.9,"vehicle":"Blue e-bike","photo":"https://cdn.example.com/d/42.jpg"},
         "stops":[{"label":"Restaurant","done":true},{"label":"Customer","done":false}],
         "items_count":3,"total":27.4,"currency":"EUR","message":"Your rider is 5 minutes away 🚲","restaurant":"Pasta Piazza",
         "tip":2.5,"contactless":true,"delayed":false,"delay_minutes":0,"map_zoom":15,"lat":48.8566,"lon":2.3522,
         "note":"Ring twice"}
        """#

    func rate(seconds: Double = 1.0, _ body: () -> Void) -> Double {
        let clock = ContinuousClock()
        let start = clock.now
        var n = 0
        while true {
            for _ in 0..<256 { body() }
            n += 256
            let elapsed = start.duration(to: clock.now)
            let s = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            if s >= seconds { return Double(n) / s }
        }
    }

    func testBenchmarkValidate() throws {
        let schemaJSON = try JSONValue.parse(Self.schemaText)
        let schema = try StateSchema.compile(schemaJSON)
        let state = try JSONValue.parse(Self.stateText)
        XCTAssertEqual(schema.root20Count, 20)
        XCTAssertNil(schema.validate(state))
        var bad = state.objectValue!
        bad["stops"] = try JSONValue.parse(#"[{"label":"Restaurant","done":true},{"label":"Customer","done":"no"}]"#)
        let badState = JSONValue.object(bad)
        XCTAssertEqual(schema.validate(badState)?.pointer, "/stops/1/done")

        var sink = 0
        let valid = rate { if schema.validate(state) == nil { sink &+= 1 } }
        let invalid = rate { if schema.validate(badState) != nil { sink &+= 1 } }
        let shape = rate { if (try? StateSchema.checkStateShape(state)) != nil { sink &+= 1 } }
        let compile = rate { if (try? StateSchema.compile(schemaJSON)) != nil { sink &+= 1 } }
        XCTAssertGreaterThan(sink, 0)
        print(String(format: "schema-bench validate_valid_per_sec=%.0f ns_per_op=%.0f", valid, 1e9 / valid))
        print(String(format: "schema-bench validate_invalid_per_sec=%.0f ns_per_op=%.0f", invalid, 1e9 / invalid))
        print(String(format: "schema-bench check_state_shape_per_sec=%.0f ns_per_op=%.0f", shape, 1e9 / shape))
        print(String(format: "schema-bench compile_per_sec=%.0f ns_per_op=%.0f", compile, 1e9 / compile))
    }
}

private extension StateSchema {
    /// Number of top-level properties of the benchmark schema.
    var root20Count: Int { json["properties"]?.objectValue?.count ?? 0 }
}
