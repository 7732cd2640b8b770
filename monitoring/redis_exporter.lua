-- For redis_exporter's -script option: every field of INFO slidingwindow as name/value pairs,
-- named as INFO prints them; redis_exporter exports each as redis_script_values{key="<name>"}.
-- It takes numbers only (one text value stops the whole list), so the two text fields become
-- numbers: slidingwindow_version as MODULE LIST shows it (major*10000 + minor*100 + patch),
-- slidingwindow_storage as 0 (zset) or 1 (compact). A text field this script does not know is
-- left out.
local info = redis.call('INFO', 'slidingwindow')
local out = {}
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
return out
