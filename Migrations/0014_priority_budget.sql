-- 0014: installation attributes for the priority budget and channels (docs/priority-budget.md,
-- docs/endpoints.md "Installation attributes").
--
-- os_version: the device's OS version as it reports it ("18.2"; 1–3 dot-separated numbers of
-- 1–4 digits, stored canonical without leading zeros), NULL when never reported.
-- frequent_updates: the app declares NSSupportsLiveActivitiesFrequentUpdates and the user left
-- "More Frequent Updates" on; such installations get the larger priority-10 budget.
ALTER TABLE installations
  ADD COLUMN os_version text CHECK (os_version ~ '^[0-9]{1,4}(\.[0-9]{1,4}){0,2}$'),
  ADD COLUMN frequent_updates boolean NOT NULL DEFAULT false;

-- The installation object of events (installation.retired) carries the two attributes, as
-- Encode.installation does.
CREATE OR REPLACE FUNCTION lr_installation_object(i installations) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object(
    'id', i.id, 'installation_id', i.id, 'object', 'installation', 'app_id', i.app_id, 'platform', i.platform,
    'environment', i.environment, 'install_id', i.install_id, 'fcm_token_registered', i.fcm_token IS NOT NULL,
    'os_version', i.os_version, 'frequent_updates', i.frequent_updates,
    'status', i.status, 'created_at', lr_ts(i.created_at), 'retired_at', lr_ts(i.retired_at))
$$;
