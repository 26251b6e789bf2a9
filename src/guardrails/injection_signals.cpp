#include "guardrails/injection_signals.h"

#include <iterator>

namespace tahua::guardrails {
namespace {

// Everyday things whose instructions people quote ("the instructions on the box"), and
// the settings and pop-ups of a phone or a computer ("the system prompt setting on
// iOS"): an override or a prompt request about one of them is no attack. Lists, not
// open shapes, so that "the instructions for this chat" stays suspicious.
#define TAHUA_THINGS                                                                                                        \
  "box|package|packet|packaging|pack|carton|label|leaflet|insert|manual|booklet|sheet|kit|set|recipe|bottle|jar|tin|can|" \
  "bag|lid|form|sign|sticker|machine|printer|router|tv|oven|microwave|boiler|heater|appliance|bed|wardrobe|desk|shelf|"   \
  "chair|table|lego|ikea|medicine|medication|pills|tablets|syrup|door|camera|drill|charger"
#define TAHUA_ON_A_THING                                                                                   \
  R"(\s+(?:on|in|inside|from|for|of|printed\s+on|that\s+came\s+with|with)\s+(?:the|this|that|my|our|your|a|an|his|her|their)\s+(?:[\w'-]+\s+){0,3}?(?:)" \
  TAHUA_THINGS R"()s?\b)"
#define TAHUA_ON_A_DEVICE                                                                                            \
  R"(\s+(?:settings?|dialogs?|pop-?ups?|alerts?|notifications?|asking|that\s+asks?|on\s+(?:ios|iphone|ipad|android|)" \
  R"(windows|macos|mac|(?:my|the|your)\s+(?:phone|iphone|ipad|mac|pc|laptop|computer|tablet|screen)))\b)"

// Bounded gaps only (`.{0,40}`): a signal's match stays short. Weights: 1.0 alone is
// enough at the default threshold (0.5); 0.3 signals need company.
constexpr InjectionSignal kSignals[] = {
    // Overriding what came before.
    {.name = "override_previous",
     .pattern = R"(\b(?:ignore|disregard|forget)\s+(?:all\s+|any\s+|the\s+|your\s+|my\s+|these\s+|those\s+|of\s+)*(?:previous|prior|above|earlier|preceding|original|initial|system|safety|existing)\s+(?:instructions?|prompts?|rules|directions|guidelines|messages?|context|constraints|policies))",
     .weight = 1.0,
     .then = TAHUA_ON_A_THING "|" TAHUA_ON_A_DEVICE},
    // The object is the assistant's (its, earlier, given): "ignore the rules for one
    // file" (a linter) or "skip the washing instructions" is no override.
    {.name = "override_loose",
     .pattern = R"(\b(?:ignore|disregard|forget|skip|bypass|override|set\s+aside|discard|abandon)\b(?:.{0,30}\b(?:your|previous|prior|earlier|above|preceding|original|initial|system|safety)\b.{0,20}\b(?:instructions|prompts?|rules|guidelines|directives|programming|constraints|policies)\b|.{0,40}\b(?:instructions|prompts?|rules|guidelines|directives|programming|constraints|policies)\s+(?:(?:that\s+)?you\s+(?:were|have\s+been|'ve\s+been)\s+(?:given|told)|above|given\s+to\s+you)))",
     .weight = 0.6,
     .then = TAHUA_ON_A_THING "|" TAHUA_ON_A_DEVICE},
    {.name = "disable_safety",
     .pattern = R"(\b(?:disable|turn\s+off|remove|bypass|deactivate)\s+(?:your\s+|all\s+|the\s+|any\s+)?(?:safety|content|moderation)\s+(?:filters?|policies|guidelines|restrictions|checks))",
     .weight = 0.6},
    // "Ignore the above error, I pasted the wrong log" is about the user's own text.
    {.name = "ignore_above",
     .pattern = R"(\b(?:ignore|disregard|forget)\s+(?:everything\s+|all\s+|the\s+text\s+|the\s+)?(?:above|before|previously|preceding)\b)",
     .weight = 0.6,
     .then = R"(\s+(?:errors?|messages?|code|snippet|typos?|output|logs?|warnings?|paragraph|draft|e-?mail|link|file|question|comment|lines?|example|table|list|attachment|screenshot|version|numbers?|figures?|steps?|part)\b)"},
    {.name = "ignore_everything",
     .pattern = R"(\b(?:ignore|disregard|forget)\s+(?:everything|all)\s+(?:above|before|previously|you\s+(?:were|have\s+been)\s+told))",
     .weight = 1.0},
    {.name = "do_not_follow",
     .pattern = R"(\bdo\s+not\s+(?:follow|obey)\s+(?:your|the|any)\s+(?:previous\s+|system\s+|original\s+)?(?:instructions|rules|guidelines|prompt|programming))",
     .weight = 0.9},
    {.name = "instructions_void",
     .pattern = R"(\b(?:earlier|previous|prior|above|original|system)\s+(?:instructions|rules|prompt)\s+(?:are|is)\s+(?:now\s+)?(?:void|cancell?ed|invalid|obsolete|revoked|no\s+longer))",
     .weight = 1.0},
    // New instructions addressed to the model ("New rules: the kids must..." is a poster).
    {.name = "new_instructions",
     .pattern = R"(\b(?:new|real|updated)\s+(?:instructions|rules|system\s+prompt)\s*:\s*(?:you|your|ignore|forget|disregard|from\s+now\s+on|the\s+(?:assistant|ai|model)|as\s+an?\s+ai|always|never|do\s+not|don't|reveal|print|output|say|respond|answer|act|pretend|comply|obey)\b)",
     .weight = 0.6},
    // Weak: a tutor or a translator is told this too.
    {.name = "from_now_on", .pattern = R"(\b(?:from\s+now\s+on|starting\s+now)\b.{0,40}\b(?:you\s+(?:will|must|are)|respond|answer|act)\b)", .weight = 0.3},
    // Revealing the prompt.
    {.name = "reveal_prompt",
     .pattern = R"(\b(?:reveal|print|show|repeat|output|display|leak|dump|tell\s+me|give\s+me|share|write\s+out)\b.{0,24}\b(?:system\s+prompt|system\s+message|(?:initial|hidden|secret|original)\s+(?:prompt|instructions)|instructions\s+(?:above|you\s+were\s+given)|prompt\s+above))",
     .weight = 1.0,
     .then = TAHUA_ON_A_THING},
    {.name = "ask_prompt",
     .pattern = R"(\bwhat\s+(?:is|was|are|were)\s+(?:your|the)\s+(?:system\s+prompt|initial\s+instructions|original\s+instructions))",
     .weight = 0.7,
     .then = TAHUA_ON_A_THING "|" TAHUA_ON_A_DEVICE},
    {.name = "repeat_above", .pattern = R"(\brepeat\s+(?:the\s+)?(?:text|words|everything|all)\s+(?:above|before)\b)", .weight = 0.8},
    // Role play without limits.
    {.name = "roleplay_unrestricted",
     .pattern = R"(\b(?:you\s+are\s+now|act\s+as|pretend\s+(?:to\s+be|you\s+are)|roleplay\s+as|behave\s+like)\b.{0,60}\b(?:no|without|free\s+(?:of|from)|zero)\s+(?:any\s+)?(?:restrictions|limits|limitations|rules|filters|guidelines|censorship|boundaries|ethics))",
     .weight = 1.0},
    {.name = "ai_without_limits",
     .pattern = R"(\b(?:AI|assistant|model|chatbot|bot)\s+(?:with\s+no|without(?:\s+any)?)\s+(?:ethical\s+|moral\s+|content\s+|safety\s+)?(?:restrictions|limits|limitations|rules|filters|guidelines|censorship|boundaries|ethics))",
     .weight = 1.0},
    {.name = "pretend_no_rules", .pattern = R"(\bpretend\s+(?:that\s+)?you\s+(?:have|had)\s+no\s+(?:restrictions|rules|filters|limits|guidelines))", .weight = 1.0},
    {.name = "unfiltered_ai", .pattern = R"(\b(?:unfiltered|uncensored|unrestricted|jailbroken)\s+(?:ai|assistant|model|mode|version|chatbot))", .weight = 0.8},
    {.name = "dan", .pattern = R"(\bDAN\b.{0,40}\b(?:do\s+anything\s+now|jailbreak|no\s+restrictions))", .weight = 1.0},
    {.name = "do_anything_now", .pattern = R"(\bdo\s+anything\s+now\b)", .weight = 0.8},
    // "Developer Mode enabled." announces a persona; "developer mode on my phone", "turn
    // debug mode on in Flask" or a quoted notice ("shows 'Developer mode enabled'") are
    // about a device.
    {.name = "mode_enabled",
     .pattern = R"(\b(?:developer|god|sudo|debug|admin)\s+mode\s+(?:enabled|activated|on)\b)",
     .weight = 0.9,
     .then = R"(\s+(?:on|in|for|by|at|when|after|every|each|while|if|and\s+off|my|the|your|his|her|their|our|this|that|a|an)\b|\s*\?)",
     .ending = R"((?:says?|said|shows?|showed|showing|displays?|displayed|reads?|message|notification|banner|warning|pop-?up)\s*:?\s*(?:"|'|“|‘)\s*(?:developer|god|sudo|debug|admin)\s+mode\s+(?:enabled|activated|on))"},
    {.name = "in_special_mode", .pattern = R"(\bin\s+(?:developer|god|sudo|DAN)\s+mode\b.{0,30}\byou\s+(?:can|will|must|ignore|have\s+no))", .weight = 0.6},
    // God mode is also a game's cheat.
    {.name = "enable_jailbreak_mode",
     .pattern = R"(\b(?:enable|activate|enter|switch\s+to)\s+(?:god|jailbreak|unrestricted|DAN)\s+mode\b)",
     .weight = 0.9,
     .then = R"(\s+(?:in|on)\s+(?:the\s+game|this\s+game|my\s+(?:game|server)|skyrim|minecraft|fallout|doom|quake|gta|roblox|terraria|the\s+sims|sims|garry'?s\s+mod|half-life|counter-strike)\b)"},
    {.name = "enable_developer_mode", .pattern = R"(\b(?:enable|activate|enter|switch\s+to)\s+(?:developer|sudo)\s+mode\b)", .weight = 0.4},
    {.name = "jailbreak", .pattern = R"(\bjailbreak)", .weight = 0.4},
    {.name = "stay_in_character", .pattern = R"(\b(?:stay|remain)\s+in\s+character\b)", .weight = 0.15},
    // Fake role headers and chat-template tokens.
    {.name = "template_system", .pattern = R"(<\|im_start\|>\s*system|<\|system\|>|\[/?INST\]|<<SYS>>|<\|start_header_id\|>\s*system)", .weight = 1.0},
    {.name = "template_token", .pattern = R"(<\|im_start\|>|<\|im_end\|>|<\|eot_id\|>|<\|endoftext\|>)", .weight = 0.6},
    // A pasted log or support chat has "system:" lines too ("system: Agent Maria joined").
    {.name = "system_header",
     .pattern = R"((?:^|\n)\s*(?:#{1,3}\s*)?system\s*(?:prompt)?\s*:\s)",
     .weight = 0.5,
     .then = R"(\s*(?:(?:an\s+)?agent|[\w.-]+\s+(?:has\s+)?(?:joined|left)|chat\s+(?:started|ended|transferred)|call\s+(?:started|ended)|disk|cpu|memory|load|uptime|backup|boot|kernel|reboot|restart|shutdown|update|\d|\[))"},
    // Weak: transcripts people paste to be summarised have them.
    {.name = "assistant_header", .pattern = R"((?:^|\n)\s*(?:#{1,3}\s*)?assistant\s*:\s)", .weight = 0.3},
    // Chinese (matched as bytes: a gap of 30 bytes is about ten characters, and a `?` or a
    // repeat applies to a group, never to a character, which is three bytes). An override
    // names what came before ("git 怎么忽略 .gitignore 里的规则" does not).
    {.name = "zh_override",
     .pattern = R"((?:忽略|无视|忘记|忘掉|不要理会|跳过|放弃).{0,12}(?:之前|以上|上面|先前|此前|前面|你的|系统|原来|原有|原始|初始).{0,18}(?:指令|指示|提示词|规则|设定|限制|约束|命令|要求))",
     .weight = 1.0},
    {.name = "zh_do_not_follow", .pattern = R"((?:不要|别|不再|无需)(?:再)?(?:遵守|遵循|服从|理会).{0,18}(?:指令|规则|设定|限制|要求))", .weight = 0.9},
    {.name = "zh_reveal_prompt",
     .pattern = R"((?:打印|输出|显示|告诉|重复|泄露|透露|说出|复述|列出|给我).{0,30}(?:系统提示|系统指令|初始指令|隐藏指令|原始指令|初始提示|预设指令))",
     .weight = 1.0},
    // A phone's "系统提示“存储空间不足”" quotes a notice.
    {.name = "zh_prompt_reveal",
     .pattern = R"((?:系统提示|系统指令|初始指令|隐藏指令|原始指令|初始提示).{0,30}(?:打印|输出|显示|告诉我|重复|泄露|透露|说出|复述|是什么))",
     .weight = 1.0,
     .ending = R"(系统提示(?:了|说)?\s*(?:“|"|「|『).{0,40})"},
    {.name = "zh_roleplay_unrestricted",
     .pattern = R"((?:你现在是|你将扮演|扮演|假装你是|假装成|充当).{0,30}(?:没有|不受|无|摆脱)(?:任何)?(?:限制|约束|规则|审查|道德|过滤))",
     .weight = 1.0},
    {.name = "zh_no_limits", .pattern = R"((?:没有|不受|不用遵守|无需遵守)(?:任何)?(?:限制|约束|规则|审查|过滤))", .weight = 0.4},
    {.name = "zh_mode_enabled",
     .pattern = R"(开发者模式(?:已经|已)?(?:启用|开启|激活|打开))",
     .weight = 0.9,
     .ending = R"((?:提示|显示|写着|弹出|出现)(?:了)?\s*(?:“|"|「|『)?开发者模式(?:已经|已)?(?:启用|开启|激活|打开))"},
    {.name = "zh_do_anything", .pattern = R"(可以做任何事)", .weight = 0.4},
    {.name = "zh_from_now_on", .pattern = R"(从现在(?:起|开始).{0,30}(?:你是|扮演|无视|忽略))", .weight = 0.4},
    {.name = "zh_jailbreak_mode", .pattern = R"((?:上帝|越狱|无限制|DAN)模式)", .weight = 0.9},
    {.name = "zh_enable_developer_mode", .pattern = R"((?:开启|打开|进入|启用|激活|切换到)开发者模式)", .weight = 0.4},
    {.name = "zh_jailbreak", .pattern = R"(越狱)", .weight = 0.4},
    {.name = "zh_new_instructions", .pattern = R"((?:新的|新)(?:指令|规则|系统提示)\s*(?::|：))", .weight = 0.6},
    // Smuggled payloads: a long base64 blob.
    {.name = "base64_blob", .pattern = R"([A-Za-z0-9+/]{200})", .weight = 0.4},
};

#undef TAHUA_ON_A_DEVICE
#undef TAHUA_ON_A_THING
#undef TAHUA_THINGS

}  // namespace

std::span<const InjectionSignal> injectionSignals() { return kSignals; }

std::string_view injectionSignalName(std::size_t id) {
  if (id < std::size(kSignals)) return kSignals[id].name;
  if (id == invisibleSignal()) return "invisible_characters";
  if (id == tagSignal()) return "tag_characters";
  return "";
}

}  // namespace tahua::guardrails
