SELECT trial_id, params_json,
  (SELECT json_group_array(json_extract(metrics_json, '$.val_acc'))
     FROM (SELECT metrics_json FROM reports_v r
            WHERE r.experiment = t.experiment AND r.trial_id = t.trial_id
            ORDER BY iteration)) AS curve
FROM trials_v t
WHERE experiment = 'digits-curves' AND status = 'TERMINATED' AND iterations = 27
ORDER BY trial_id
