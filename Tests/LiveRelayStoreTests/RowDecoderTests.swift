import Foundation
import XCTest
import Postgres
@testable import LiveRelayStore
import LiveRelayTestSupport

/// `RowDecoder` (Sources/LiveRelayStore/RowDecoder.swift), without a database: every
/// `RowDecodable` record reads exactly the columns its queries select, each value through the
/// `PostgresRow` accessor of its type, and a bad row fails as those accessors fail.
final class RowDecoderTests: XCTestCase {
    static let timestamp = "2024-05-01 12:00:00.123456+00"
    static let date = Date(timeIntervalSince1970: 1_714_564_800.123456)

    /// Text of a populated row by column, in the server's text format: timestamps, `text[]`,
    /// `bytea`, integers and booleans; any other column holds its own name.
    static func sampleText(_ column: String) -> String {
        switch column {
        case "topics", "targets", "created_from", "permissions", "events": return #"{a.b,"c d"}"#
        case "private_key_sealed": return "\\x00ff"
        case "id", "attempt", "status_code", "duration_ms": return "7"
        case "frequent_updates": return "t"
        case _ where column.hasSuffix("_at") || column == "failing_since": return timestamp
        default: return column
        }
    }

    /// A row of `columns` (a store's comma-separated column list), column `c` holding `text(c)`.
    static func row(_ columns: String, text: (String) -> String? = sampleText) -> PostgresRow {
        let names = columns.split(separator: ",").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        return PostgresRow(columns: names, values: names.map(text))
    }

    /// Decodes `type` from a populated row of `columns` and checks that its stored properties
    /// are those columns, one each: none the query selects goes unread, none is missing from it.
    func assertReadsExactly<T: RowDecodable>(_ type: T.Type, _ columns: String, line: UInt = #line) throws {
        let row = Self.row(columns)
        let record = try T(row: row)
        let properties = Mirror(reflecting: record).children.compactMap(\.label).map(RowDecoder.column(for:))
        XCTAssertEqual(properties.sorted(), row.columns.sorted(), "\(type)", line: line)
    }

    func testEveryRecordReadsExactlyTheColumnsItsQueriesSelect() throws {
        let records: [(any RowDecodable.Type, String)] = [
            (MasterKeyRecord.self, KeyStore.masterColumns), (SenderKeyRecord.self, KeyStore.senderColumns),
            (PublishableKeyRecord.self, KeyStore.publishableColumns),
            (APNsCredentialRecord.self, ProviderCredentialStore.apnsColumns), (FCMCredentialRecord.self, ProviderCredentialStore.fcmColumns),
            (BindingRecord.self, BindingStore.columns), (StartTargetRecord.self, StartTargetStore.columns),
            (WebhookEndpointRecord.self, WebhookStore.columns), (WebhookAttemptRecord.self, WebhookStore.attemptColumns),
            (InstallationRecord.self, InstallationStore.columns)
        ]
        for (type, columns) in records { try assertReadsExactly(type, columns) }
    }

    func testValuesGoThroughTheAccessorOfEachPropertyType() throws {
        let nulls: Set = ["last_success_at", "last_failure_reason"]
        let apns = try APNsCredentialRecord(row: Self.row(ProviderCredentialStore.apnsColumns) { nulls.contains($0) ? nil : Self.sampleText($0) })
        XCTAssertEqual(
            apns,
            APNsCredentialRecord(
                tenantId: "tenant_id", environment: "environment", teamId: "team_id", keyId: "key_id", topics: ["a.b", "c d"],
                privateKeySealed: [0x00, 0xff], fingerprint: "fingerprint", createdBy: "created_by", createdAt: Self.date,
                updatedAt: Self.date, lastSuccessAt: nil, lastFailureAt: Self.date, lastFailureReason: nil))
        let attempt = try WebhookAttemptRecord(row: Self.row(WebhookStore.attemptColumns) { $0 == "status_code" ? nil : Self.sampleText($0) })
        XCTAssertEqual(
            attempt,
            WebhookAttemptRecord(
                id: 7, eventId: "event_id", eventType: "event_type", attempt: 7, statusCode: nil, error: "error", durationMs: 7,
                deliveredAt: Self.date))
        XCTAssertEqual(try InstallationRecord(row: Self.row(InstallationStore.columns)).frequentUpdates, true)
    }

    func testABadRowFailsAsThePostgresRowAccessorsDo() {
        func decodingMessage(_ text: @escaping (String) -> String?, columns: String = KeyStore.masterColumns) -> String? {
            do {
                _ = try MasterKeyRecord(row: Self.row(columns, text: text))
                return nil
            } catch let e as PostgresError {
                XCTAssertEqual(e.kind, .decoding)
                return e.message
            } catch {
                return "\(error)"
            }
        }
        XCTAssertEqual(decodingMessage { $0 == "label" ? nil : Self.sampleText($0) }, #"column "label" is NULL"#)
        XCTAssertEqual(
            decodingMessage({ Self.sampleText($0) }, columns: "tenant_id, id, label, created_by, created_at, expires_at"),
            #"column "revoked_at" is not in the result (have: tenant_id, id, label, created_by, created_at, expires_at)"#,
            "a missing column throws even for an optional property")
        XCTAssertEqual(
            decodingMessage { $0 == "created_at" ? "yesterday" : Self.sampleText($0) }, #"column "created_at" is not a valid timestamptz: yesterday"#)
        XCTAssertNil(decodingMessage { $0 == "created_by" || $0 == "revoked_at" ? nil : Self.sampleText($0) }, "NULL in optional properties")
    }

    /// A record with a property type no column maps to.
    struct Unreadable: RowDecodable { let ratio: Float }

    func testAPropertyTypeWithoutAnAccessorIsADecodingError() {
        XCTAssertThrowsError(try Unreadable(row: PostgresRow(columns: ["ratio"], values: ["0.5"]))) { error in
            XCTAssertEqual((error as? PostgresError)?.message, #"column "ratio": a row cannot be decoded as Float"#)
        }
    }

    func testColumnNamesAreThePropertiesInSnakeCase() {
        let names = [
            "id": "id", "tenantId": "tenant_id", "privateKeySealed": "private_key_sealed", "tokenURI": "token_uri",
            "priority10Budget": "priority10_budget", "URLValue": "url_value"
        ]
        for (property, column) in names { XCTAssertEqual(RowDecoder.column(for: property), column, property) }
    }
}
