-- For redis_exporter's -script option: every field of INFO slidingwindow as name/value pairs,
-- named as INFO prints them; redis_exporter exports each as redis_script_values{key="<name>"}.
-- It takes numbers only (one text value stops the whole list), so the two text fields become
-- numbers: slidingwindow_version as MODULE LIST shows it (major*10000 + minor*100 + patch),
-- slidingwindow_storage as 0 (zset) or 1 (compact). A text field this script does not know is
-- left out. Then the keys refused most (SLIDINGWINDOW.TOP COUNT 10, at most 10 whatever the
-- traffic) as slidingwindow_top_refused:<key>, their estimated refusals since the last TOPRESET;
-- bytes of a key outside printable ASCII become '?'.
local info = redis.call('INFO', 'slidingwindow')
local out = {}
local top_keys = tonumber(string.match(info, 'slidingwindow_top_keys:(%d+)') or '0')
for name, value in string.gmatch(info, '([%w_]+):([^\r\n]*)') do
    -- Numbers go on as INFO wrote them (Lua's own printing keeps only 14 digits).
    local number = string.match(value, '^%d+$')
    if name == 'slidingwindow_version' then
        local major, minor, patch = string.match(value, '^(%d+)%.(%d+)%.(%d+)')
        if major then
            number = string.format('%d', major * 10000 + minor * 100 + patch)
        end
    elseif name == 'slidingwindow_storage' then
        number = (value == 'compact') and '1' or '0'
    end
    if number then
        out[#out + 1] = name
        out[#out + 1] = number
    end
end
if top_keys > 0 then
    local top = redis.call('SLIDINGWINDOW.TOP', 'COUNT', tostring(math.min(10, top_keys)))
    for _, entry in ipairs(top) do
        out[#out + 1] = 'slidingwindow_top_refused:' .. string.gsub(entry[1], '[^\32-\126]', '?')
        out[#out + 1] = string.format('%d', entry[2])
    end
end
return out
