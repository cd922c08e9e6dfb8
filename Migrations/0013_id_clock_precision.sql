-- Ids made by SQL (trigger-recorded events) sort in creation order within a millisecond: the
-- 12 bits after the version nibble carry the sub-millisecond part of clock_timestamp()
-- (microseconds 0–999 scaled to 0–4092; RFC 9562 §6.2 method 3, "increased clock precision"),
-- the rest stays random. Within one session the microsecond value never repeats or goes back
-- (a clock stepped back, or two calls in one microsecond, take the last value + 1, kept in the
-- session setting liverelay.id_last_us). Same 26-character format as LiveRelayCore's
-- Identifier.make, whose ids carry a per-process counter in the same 12 bits.
CREATE OR REPLACE FUNCTION lr_new_id(prefix text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  us bigint := floor(extract(epoch FROM clock_timestamp()) * 1000000);
  last bigint := coalesce(nullif(current_setting('liverelay.id_last_us', true), '')::bigint, 0);
  ms bigint;
  sub int;
  b bytea := decode(replace(gen_random_uuid()::text, '-', ''), 'hex');
  bits bit(130);
  alphabet text := '0123456789abcdefghjkmnpqrstvwxyz';
  out text := '';
  i int;
BEGIN
  IF us <= last THEN us := last + 1; END IF;
  PERFORM set_config('liverelay.id_last_us', us::text, false);
  ms := us / 1000;
  sub := ((us % 1000) * 4096 / 1000)::int;
  FOR i IN 0..5 LOOP b := set_byte(b, i, ((ms >> (8 * (5 - i))) & 255)::int); END LOOP;
  b := set_byte(b, 6, 112 | (sub >> 8));              -- version 7, sub-millisecond high nibble
  b := set_byte(b, 7, sub & 255);
  b := set_byte(b, 8, (get_byte(b, 8) & 63) | 128);   -- RFC 4122 variant
  bits := B'00' || ('x' || encode(b, 'hex'))::bit(128);
  FOR i IN 0..25 LOOP out := out || substr(alphabet, substring(bits FROM i * 5 + 1 FOR 5)::int + 1, 1); END LOOP;
  RETURN prefix || '_' || out;
END $$;
